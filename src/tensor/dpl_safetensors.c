/* dpl_safetensors.c: the safetensors checkpoint format. Reading maps the file
 * (MAP_PRIVATE: tensors view the mapping, writes to them never reach the file)
 * after validating the header the way the reference reader does (size limits,
 * dtypes, offsets tiling the buffer); writing builds the JSON header (string
 * metadata first, tensors by alignment then name, padded to 8 bytes) and
 * replaces the target atomically: temp file, fsync, rename, fsync of the dir. */
#define _GNU_SOURCE
#include "dpl_tensor_internal.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int dpl_storage_wrap(void *data, int64_t nbytes, int kind, void *block, size_t map_len, dpl_storage **out);
void dpl_storage_retain(dpl_storage *s);
void dpl_storage_drop(dpl_storage *s);
int dpl_storage_sub(dpl_storage *parent, int64_t off, int64_t nbytes, dpl_storage **out);

static const char *st_names[8] = {"F32", "F64", "F16", "BF16", "I32", "I64", "U8", "BOOL"};

typedef struct st_entry {
  char *name;
  int32_t dtype, ndim;
  int64_t shape[DPL_MAX_DIMS];
  uint64_t begin, end;
} st_entry;

struct dpl_st_file {
  dpl_storage *storage; /* the whole mapping */
  uint64_t data_start;  /* 8 + header length */
  st_entry *e;
  int32_t n;
  char **mkeys, **mvals;
  int32_t nmeta;
};

/* ---- a JSON reader for the header (objects, strings, integer arrays) ---- */
typedef struct jp {
  const char *s, *end;
  const char *path;
  char err[256];
} jp;

static void ws(jp *p) { while (p->s < p->end && (*p->s == ' ' || *p->s == '\t' || *p->s == '\n' || *p->s == '\r')) p->s++; }
static int fail(jp *p, const char *what)
{
  if (!p->err[0]) snprintf(p->err, sizeof p->err, "%s at header byte %ld", what, (long)(p->end - p->s));
  return -1;
}
static int expect(jp *p, char c)
{
  ws(p);
  if (p->s >= p->end || *p->s != c) {
    char m[64];
    snprintf(m, sizeof m, "expected '%c'", c);
    return fail(p, m);
  }
  p->s++;
  return 0;
}
static void put_utf8(char *o, size_t *k, uint32_t cp)
{
  if (cp < 0x80) o[(*k)++] = (char)cp;
  else if (cp < 0x800) { o[(*k)++] = (char)(0xc0 | (cp >> 6)); o[(*k)++] = (char)(0x80 | (cp & 0x3f)); }
  else if (cp < 0x10000) { o[(*k)++] = (char)(0xe0 | (cp >> 12)); o[(*k)++] = (char)(0x80 | ((cp >> 6) & 0x3f)); o[(*k)++] = (char)(0x80 | (cp & 0x3f)); }
  else { o[(*k)++] = (char)(0xf0 | (cp >> 18)); o[(*k)++] = (char)(0x80 | ((cp >> 12) & 0x3f)); o[(*k)++] = (char)(0x80 | ((cp >> 6) & 0x3f)); o[(*k)++] = (char)(0x80 | (cp & 0x3f)); }
}
static int hex4(jp *p, uint32_t *v)
{
  if (p->end - p->s < 4) return fail(p, "truncated \\u escape");
  *v = 0;
  for (int i = 0; i < 4; i++) {
    char c = p->s[i];
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0) return fail(p, "bad \\u escape");
    *v = *v * 16 + (uint32_t)d;
  }
  p->s += 4;
  return 0;
}
/* returns a malloc'ed string */
static char *jstring(jp *p)
{
  ws(p);
  if (p->s >= p->end || *p->s != '"') { fail(p, "expected a string"); return NULL; }
  p->s++;
  const char *q = p->s;
  while (q < p->end && *q != '"') q += (*q == '\\') ? 2 : 1;
  if (q >= p->end) { fail(p, "unterminated string"); return NULL; }
  char *o = malloc((size_t)(q - p->s) * 2 + 1);
  if (!o) { fail(p, "out of memory"); return NULL; }
  size_t k = 0;
  while (p->s < p->end && *p->s != '"') {
    char c = *p->s++;
    if ((unsigned char)c < 0x20) { free(o); fail(p, "control character in string"); return NULL; }
    if (c != '\\') { o[k++] = c; continue; }
    if (p->s >= p->end) break;
    c = *p->s++;
    switch (c) {
    case '"': case '\\': case '/': o[k++] = c; break;
    case 'b': o[k++] = '\b'; break;
    case 'f': o[k++] = '\f'; break;
    case 'n': o[k++] = '\n'; break;
    case 'r': o[k++] = '\r'; break;
    case 't': o[k++] = '\t'; break;
    case 'u': {
      uint32_t cp, lo;
      if (hex4(p, &cp)) { free(o); return NULL; }
      if (cp >= 0xd800 && cp < 0xdc00 && p->end - p->s >= 6 && p->s[0] == '\\' && p->s[1] == 'u') {
        p->s += 2;
        if (hex4(p, &lo)) { free(o); return NULL; }
        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
      }
      put_utf8(o, &k, cp);
      break;
    }
    default: free(o); fail(p, "bad escape in string"); return NULL;
    }
  }
  p->s++; /* closing quote */
  o[k] = 0;
  return o;
}
static int juint(jp *p, uint64_t *v)
{
  ws(p);
  if (p->s >= p->end || *p->s < '0' || *p->s > '9') return fail(p, "expected a non-negative integer");
  uint64_t x = 0;
  while (p->s < p->end && *p->s >= '0' && *p->s <= '9') {
    if (x > (UINT64_MAX - 9) / 10) return fail(p, "integer too large");
    x = x * 10 + (uint64_t)(*p->s++ - '0');
  }
  *v = x;
  return 0;
}
static int jpeek(jp *p, char c) { ws(p); return p->s < p->end && *p->s == c; }

static int parse_uint_list(jp *p, uint64_t *vals, int max, int *n)
{
  if (expect(p, '[')) return -1;
  *n = 0;
  if (jpeek(p, ']')) { p->s++; return 0; }
  for (;;) {
    uint64_t v;
    if (juint(p, &v)) return -1;
    if (*n >= max) return fail(p, "list too long");
    vals[(*n)++] = v;
    if (jpeek(p, ',')) { p->s++; continue; }
    return expect(p, ']');
  }
}

static void st_free(dpl_st_file *f)
{
  if (!f) return;
  for (int i = 0; i < f->n; i++) free(f->e[i].name);
  for (int i = 0; i < f->nmeta; i++) { free(f->mkeys[i]); free(f->mvals[i]); }
  free(f->e);
  free(f->mkeys);
  free(f->mvals);
  if (f->storage) dpl_storage_drop(f->storage);
  free(f);
}

static int grow(void **arr, int32_t n, int32_t *cap, size_t elsz)
{
  if (n < *cap) return 0;
  int32_t nc = *cap ? *cap * 2 : 16;
  void *r = realloc(*arr, (size_t)nc * elsz);
  if (!r) return -1;
  *arr = r;
  *cap = nc;
  return 0;
}

static int parse_header(jp *p, dpl_st_file *f)
{
  int32_t cap = 0, mcap = 0, mcap2 = 0;
  if (expect(p, '{')) return -1;
  if (jpeek(p, '}')) { p->s++; return 0; }
  for (;;) {
    char *key = jstring(p);
    if (!key) return -1;
    if (expect(p, ':')) { free(key); return -1; }
    if (strcmp(key, "__metadata__") == 0) {
      free(key);
      if (expect(p, '{')) return -1;
      if (jpeek(p, '}')) p->s++;
      else for (;;) {
        char *k = jstring(p);
        if (!k) return -1;
        if (expect(p, ':')) { free(k); return -1; }
        if (!jpeek(p, '"')) { free(k); return fail(p, "__metadata__ values must be strings"); }
        char *v = jstring(p);
        if (!v) { free(k); return -1; }
        if (grow((void **)&f->mkeys, f->nmeta, &mcap, sizeof(char *)) ||
            grow((void **)&f->mvals, f->nmeta, &mcap2, sizeof(char *))) { free(k); free(v); return fail(p, "out of memory"); }
        f->mkeys[f->nmeta] = k;
        f->mvals[f->nmeta] = v;
        f->nmeta++;
        if (jpeek(p, ',')) { p->s++; continue; }
        if (expect(p, '}')) return -1;
        break;
      }
    } else {
      for (int i = 0; i < f->n; i++)
        if (strcmp(f->e[i].name, key) == 0) { free(key); return fail(p, "duplicate tensor name"); }
      if (grow((void **)&f->e, f->n, &cap, sizeof(st_entry))) { free(key); return fail(p, "out of memory"); }
      st_entry *e = &f->e[f->n++];
      memset(e, 0, sizeof *e);
      e->name = key;
      e->dtype = -1;
      int have_shape = 0, have_off = 0;
      if (expect(p, '{')) return -1;
      for (;;) {
        char *fk = jstring(p);
        if (!fk) return -1;
        if (expect(p, ':')) { free(fk); return -1; }
        if (strcmp(fk, "dtype") == 0) {
          char *d = jstring(p);
          if (!d) { free(fk); return -1; }
          for (int i = 0; i < 8; i++) if (strcmp(d, st_names[i]) == 0) e->dtype = i;
          if (e->dtype < 0) {
            snprintf(p->err, sizeof p->err, "tensor '%s' has dtype %s, which dplhost does not support", e->name, d);
            free(d);
            free(fk);
            return -1;
          }
          free(d);
        } else if (strcmp(fk, "shape") == 0) {
          uint64_t v[DPL_MAX_DIMS + 1];
          int n;
          if (parse_uint_list(p, v, DPL_MAX_DIMS, &n)) { free(fk); return -1; }
          e->ndim = n;
          for (int i = 0; i < n; i++) {
            if (v[i] > (UINT64_C(1) << 50)) { free(fk); return fail(p, "dimension too large"); }
            e->shape[i] = (int64_t)v[i];
          }
          have_shape = 1;
        } else if (strcmp(fk, "data_offsets") == 0) {
          uint64_t v[3];
          int n;
          if (parse_uint_list(p, v, 2, &n) || n != 2) { free(fk); return fail(p, "data_offsets must be [begin, end]"); }
          e->begin = v[0];
          e->end = v[1];
          have_off = 1;
        } else {
          free(fk);
          return fail(p, "unknown field in a tensor entry");
        }
        free(fk);
        if (jpeek(p, ',')) { p->s++; continue; }
        if (expect(p, '}')) return -1;
        break;
      }
      if (e->dtype < 0 || !have_shape || !have_off) return fail(p, "a tensor entry lacks dtype, shape or data_offsets");
    }
    if (jpeek(p, ',')) { p->s++; continue; }
    if (expect(p, '}')) return -1;
    break;
  }
  ws(p);
  if (p->s != p->end) return fail(p, "trailing bytes after the header object");
  return 0;
}

static int cmp_begin(const void *a, const void *b)
{
  const st_entry *x = *(st_entry *const *)a, *y = *(st_entry *const *)b;
  return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : (x->end < y->end ? -1 : x->end > y->end);
}

int dpl_st_open(const char *path, dpl_st_file **out)
{
  if (!out) return dpl_errorf(DPL_EINVAL, "safetensors: out is NULL");
  *out = NULL;
  if (!path) return dpl_errorf(DPL_EINVAL, "safetensors: path is NULL");
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return dpl_errorf(DPL_EIO, "safetensors: cannot open '%s': %s", path, strerror(errno));
  struct stat sb;
  if (fstat(fd, &sb) != 0) { int e = errno; close(fd); return dpl_errorf(DPL_EIO, "safetensors: cannot stat '%s': %s", path, strerror(e)); }
  uint64_t size = (uint64_t)sb.st_size;
  if (size < 8) { close(fd); return dpl_errorf(DPL_EINVAL, "safetensors: '%s' is too short (%llu bytes) to be a safetensors file", path, (unsigned long long)size); }
  void *map = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  int merr = errno;
  close(fd);
  if (map == MAP_FAILED) return dpl_errorf(DPL_EIO, "safetensors: cannot map '%s': %s", path, strerror(merr));
  const unsigned char *b = map;
  uint64_t hn = 0;
  for (int i = 7; i >= 0; i--) hn = (hn << 8) | b[i];
  if (hn > 100000000 || hn > size - 8) {
    munmap(map, (size_t)size);
    return dpl_errorf(DPL_EINVAL, "safetensors: '%s' has an invalid header length %llu (file of %llu bytes)", path,
                      (unsigned long long)hn, (unsigned long long)size);
  }
  dpl_st_file *f = calloc(1, sizeof *f);
  if (!f) { munmap(map, (size_t)size); return dpl_errorf(DPL_ENOMEM, "safetensors: out of memory"); }
  int st = dpl_storage_wrap(map, (int64_t)size, DPL_STORAGE_MMAP, map, (size_t)size, &f->storage);
  if (st != DPL_OK) { munmap(map, (size_t)size); free(f); return st; }
  f->data_start = 8 + hn;
  jp p = {(const char *)b + 8, (const char *)b + 8 + hn, path, {0}};
  if (hn == 0 || b[8] != '{') {
    st_free(f);
    return dpl_errorf(DPL_EINVAL, "safetensors: '%s': the header must be a JSON object starting with '{'", path);
  }
  if (parse_header(&p, f) != 0) {
    st_free(f);
    return dpl_errorf(DPL_EINVAL, "safetensors: '%s': invalid header: %s", path, p.err);
  }
  /* sizes and tiling */
  uint64_t buf = size - f->data_start;
  st_entry **sorted = malloc(sizeof(st_entry *) * (size_t)(f->n ? f->n : 1));
  if (!sorted) { st_free(f); return dpl_errorf(DPL_ENOMEM, "safetensors: out of memory"); }
  for (int i = 0; i < f->n; i++) sorted[i] = &f->e[i];
  qsort(sorted, (size_t)f->n, sizeof *sorted, cmp_begin);
  uint64_t at = 0;
  for (int i = 0; i < f->n; i++) {
    st_entry *e = sorted[i];
    /* each dim is at most 2^50 (parse_header), but their product can wrap: [2^32, 2^32]
     * would read as 0 elements and pass with empty data_offsets */
    int64_t numel = 1;
    for (int d = 0; d < e->ndim; d++) {
      if (__builtin_mul_overflow(numel, e->shape[d], &numel) || numel > (INT64_C(1) << 50)) {
        free(sorted);
        char sb[160];
        int rc = dpl_errorf(DPL_EINVAL, "safetensors: '%s': tensor '%s' has shape %s, too many elements", path, e->name,
                            dpl_shape_str(e->ndim, e->shape, sb, sizeof sb));
        st_free(f);
        return rc;
      }
    }
    uint64_t want = (uint64_t)numel * (uint64_t)dpl_elsize(e->dtype);
    if (e->end < e->begin || e->end - e->begin != want || e->begin != at) {
      free(sorted);
      int rc = dpl_errorf(DPL_EINVAL,
                          "safetensors: '%s': tensor '%s' has data_offsets [%llu, %llu] but needs %llu bytes starting at %llu", path,
                          e->name, (unsigned long long)e->begin, (unsigned long long)e->end, (unsigned long long)want,
                          (unsigned long long)at);
      st_free(f);
      return rc;
    }
    at = e->end;
  }
  free(sorted);
  if (at != buf) {
    st_free(f);
    return dpl_errorf(DPL_EINVAL, "safetensors: '%s': the tensors cover %llu bytes but the data section has %llu", path,
                      (unsigned long long)at, (unsigned long long)buf);
  }
  *out = f;
  return DPL_OK;
}

void dpl_st_close(dpl_st_file *f) { st_free(f); }
int32_t dpl_st_count(const dpl_st_file *f) { return f ? f->n : 0; }
const char *dpl_st_name(const dpl_st_file *f, int32_t i) { return f && i >= 0 && i < f->n ? f->e[i].name : NULL; }
int32_t dpl_st_metadata_count(const dpl_st_file *f) { return f ? f->nmeta : 0; }
const char *dpl_st_metadata_key(const dpl_st_file *f, int32_t i) { return f && i >= 0 && i < f->nmeta ? f->mkeys[i] : NULL; }
const char *dpl_st_metadata_value(const dpl_st_file *f, int32_t i) { return f && i >= 0 && i < f->nmeta ? f->mvals[i] : NULL; }

int dpl_st_get(const dpl_st_file *f, int32_t i, dpl_tensor **out)
{
  if (!out) return dpl_errorf(DPL_EINVAL, "safetensors: out is NULL");
  *out = NULL;
  if (!f) return dpl_errorf(DPL_EINVAL, "safetensors: file is NULL (closed?)");
  if (i < 0 || i >= f->n) return dpl_errorf(DPL_EINVAL, "safetensors: tensor %d out of range (the file has %d)", (int)i, (int)f->n);
  const st_entry *e = &f->e[i];
  int64_t es = dpl_elsize(e->dtype);
  uint64_t off = f->data_start + e->begin;
  if (off % (uint64_t)es == 0) {
    /* a view on the mapping, through a storage of its own bytes */
    dpl_tensor t;
    memset(&t, 0, sizeof t);
    t._dtype = e->dtype;
    DPL_TRY(dpl_storage_sub(f->storage, (int64_t)off, (int64_t)(e->end - e->begin), &t._storage));
    int64_t st[DPL_MAX_DIMS];
    int64_t s = 1;
    for (int d = e->ndim - 1; d >= 0; d--) { st[d] = s; s *= e->shape[d]; }
    int rc = dpl_make_view(&t, e->ndim, e->shape, st, 0, out);
    dpl_storage_drop(t._storage); /* the view holds its own reference */
    return rc;
  }
  /* unaligned: copy out */
  DPL_TRY(dpl_new("safetensors", e->dtype, e->ndim, e->shape, NULL, out));
  memcpy((*out)->_data, f->storage->data + off, (size_t)(e->end - e->begin));
  return DPL_OK;
}

/* ---- writing ---- */
typedef struct sbuf { char *p; size_t n, cap; int oom; } sbuf;
static void sb_put(sbuf *b, const char *s, size_t n)
{
  if (b->oom) return;
  if (b->n + n + 1 > b->cap) {
    size_t nc = (b->cap ? b->cap * 2 : 1024);
    while (nc < b->n + n + 1) nc *= 2;
    char *r = realloc(b->p, nc);
    if (!r) { b->oom = 1; return; }
    b->p = r;
    b->cap = nc;
  }
  memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = 0;
}
static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }
static void sb_json(sbuf *b, const char *s)
{
  sb_put(b, "\"", 1);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    char esc[8];
    if (c == '"' || c == '\\') { esc[0] = '\\'; esc[1] = (char)c; sb_put(b, esc, 2); }
    else if (c < 0x20) { snprintf(esc, sizeof esc, "\\u%04x", c); sb_put(b, esc, 6); }
    else sb_put(b, (const char *)&c, 1);
  }
  sb_put(b, "\"", 1);
}

typedef struct worder { int32_t i; int64_t es; const char *name; } worder;
static int cmp_order(const void *a, const void *b)
{
  const worder *x = a, *y = b;
  if (x->es != y->es) return x->es > y->es ? -1 : 1;
  return strcmp(x->name, y->name);
}

static int write_all(int fd, const void *p, size_t n)
{
  const char *c = p;
  while (n > 0) {
    ssize_t w = write(fd, c, n);
    if (w < 0) { if (errno == EINTR) continue; return -1; }
    c += w;
    n -= (size_t)w;
  }
  return 0;
}

/* GPU tensors are written from host copies */
static int write_staged(const char *path, int32_t n, const char *const *names, dpl_tensor *const *tensors,
                        int32_t nmeta, const char *const *keys, const char *const *values)
{
  dpl_tensor **host = calloc((size_t)n, sizeof *host);
  if (!host) return dpl_errorf(DPL_ENOMEM, "safetensors write: out of memory");
  int st = DPL_OK;
  for (int i = 0; i < n && st == DPL_OK; i++) {
    if (dpl_is_devmem(tensors[i])) st = dpl_tensor_to(tensors[i], tensors[i]->_dtype, DPL_DEVICE_CPU, 0, &host[i]);
    else st = dpl_tensor_alias(tensors[i], &host[i]);
  }
  if (st == DPL_OK) st = dpl_st_write(path, n, names, host, nmeta, keys, values);
  for (int i = 0; i < n; i++) dpl_tensor_release(host[i]);
  free(host);
  return st;
}

int dpl_st_write(const char *path, int32_t n, const char *const *names, dpl_tensor *const *tensors, int32_t nmeta,
                 const char *const *keys, const char *const *values)
{
  const char *op = "safetensors write";
  for (int i = 0; i < n && tensors; i++)
    if (tensors[i] && tensors[i]->_storage && dpl_is_devmem(tensors[i]))
      return write_staged(path, n, names, tensors, nmeta, keys, values);
  if (!path) return dpl_errorf(DPL_EINVAL, "%s: path is NULL", op);
  if (n < 0 || (n > 0 && (!names || !tensors))) return dpl_errorf(DPL_EINVAL, "%s: bad tensor list (n = %d)", op, (int)n);
  if (nmeta < 0 || (nmeta > 0 && (!keys || !values))) return dpl_errorf(DPL_EINVAL, "%s: bad metadata list (n = %d)", op, (int)nmeta);
  for (int i = 0; i < n; i++) {
    if (!names[i] || !names[i][0]) return dpl_errorf(DPL_EINVAL, "%s: tensor %d has an empty name", op, i);
    if (strcmp(names[i], "__metadata__") == 0) return dpl_errorf(DPL_EINVAL, "%s: '__metadata__' cannot name a tensor", op);
    char what[64];
    snprintf(what, sizeof what, "tensor '%.40s'", names[i]);
    DPL_TRY(dpl_check_tensor(op, what, tensors[i]));
    for (int j = 0; j < i; j++)
      if (strcmp(names[i], names[j]) == 0) return dpl_errorf(DPL_EINVAL, "%s: the name '%s' appears twice", op, names[i]);
  }
  for (int i = 0; i < nmeta; i++)
    if (!keys[i] || !values[i]) return dpl_errorf(DPL_EINVAL, "%s: metadata entry %d is NULL", op, i);
  worder *ord = malloc(sizeof(worder) * (size_t)(n ? n : 1));
  if (!ord) return dpl_errorf(DPL_ENOMEM, "%s: out of memory", op);
  for (int i = 0; i < n; i++) { ord[i].i = i; ord[i].es = dpl_elsize(tensors[i]->_dtype); ord[i].name = names[i]; }
  qsort(ord, (size_t)n, sizeof *ord, cmp_order);
  sbuf h = {0};
  sb_str(&h, "{");
  int first = 1;
  if (nmeta > 0) {
    sb_str(&h, "\"__metadata__\":{");
    for (int i = 0; i < nmeta; i++) {
      if (i) sb_str(&h, ",");
      sb_json(&h, keys[i]);
      sb_str(&h, ":");
      sb_json(&h, values[i]);
    }
    sb_str(&h, "}");
    first = 0;
  }
  uint64_t at = 0;
  for (int k = 0; k < n; k++) {
    const dpl_tensor *t = tensors[ord[k].i];
    char num[64];
    if (!first) sb_str(&h, ",");
    first = 0;
    sb_json(&h, names[ord[k].i]);
    sb_str(&h, ":{\"dtype\":\"");
    sb_str(&h, st_names[t->_dtype]);
    sb_str(&h, "\",\"shape\":[");
    for (int d = 0; d < t->_ndim; d++) {
      snprintf(num, sizeof num, "%s%lld", d ? "," : "", (long long)t->_shape[d]);
      sb_str(&h, num);
    }
    uint64_t nb = (uint64_t)(t->_numel * dpl_elsize(t->_dtype));
    snprintf(num, sizeof num, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)at, (unsigned long long)(at + nb));
    sb_str(&h, num);
    at += nb;
  }
  sb_str(&h, "}");
  while (!h.oom && h.n % 8 != 0) sb_str(&h, " ");
  if (h.oom) { free(h.p); free(ord); return dpl_errorf(DPL_ENOMEM, "%s: out of memory building the header", op); }
  char *tmp = malloc(strlen(path) + 64);
  if (!tmp) { free(h.p); free(ord); return dpl_errorf(DPL_ENOMEM, "%s: out of memory", op); }
  sprintf(tmp, "%s.tmp.%ld", path, (long)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  int st = DPL_OK;
  if (fd < 0) st = dpl_errorf(DPL_EIO, "%s: cannot create '%s': %s", op, tmp, strerror(errno));
  if (st == DPL_OK) {
    unsigned char len[8];
    uint64_t hn = h.n;
    for (int i = 0; i < 8; i++) len[i] = (unsigned char)(hn >> (8 * i));
    if (write_all(fd, len, 8) || write_all(fd, h.p, h.n)) st = dpl_errorf(DPL_EIO, "%s: writing '%s': %s", op, tmp, strerror(errno));
    for (int k = 0; k < n && st == DPL_OK; k++) {
      const dpl_tensor *t = tensors[ord[k].i];
      dpl_tensor *c = NULL;
      st = dpl_contig_as(op, t, t->_dtype, &c);
      if (st == DPL_OK && c->_numel > 0 && write_all(fd, c->_data, (size_t)(c->_numel * dpl_elsize(c->_dtype))))
        st = dpl_errorf(DPL_EIO, "%s: writing '%s': %s", op, tmp, strerror(errno));
      dpl_tensor_release(c);
    }
    if (st == DPL_OK && fsync(fd) != 0) st = dpl_errorf(DPL_EIO, "%s: fsync of '%s': %s", op, tmp, strerror(errno));
    if (close(fd) != 0 && st == DPL_OK) st = dpl_errorf(DPL_EIO, "%s: closing '%s': %s", op, tmp, strerror(errno));
    if (st == DPL_OK && rename(tmp, path) != 0) st = dpl_errorf(DPL_EIO, "%s: renaming '%s' to '%s': %s", op, tmp, path, strerror(errno));
    if (st != DPL_OK) unlink(tmp);
    else {
      /* make the rename durable */
      char *dir = strdup(path);
      if (dir) {
        char *slash = strrchr(dir, '/');
        const char *d = ".";
        if (slash) { if (slash == dir) slash[1] = 0; else *slash = 0; d = dir; }
        int dfd = open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) { fsync(dfd); close(dfd); }
        free(dir);
      }
    }
  }
  free(tmp);
  free(h.p);
  free(ord);
  return st;
}
