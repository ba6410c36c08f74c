/* dpl_idx.c: the IDX file format (MNIST, Fashion-MNIST), plain or gzip-compressed:
 * header parsing and validation (magic, element type, dims), and reading the
 * payload into a caller's buffer in host byte order. A truncated file, a wrong
 * magic or trailing bytes are errors naming the file and what was expected.
 * Also what lazy loading and the decompressed-file cache of dpl.datasets need:
 * a file's size and mtime (the cache key), a size check that needs no
 * decompression, and a batch gather of uint8 rows through a lookup table
 * (uint8 images to floats per batch). */
#define _POSIX_C_SOURCE 200809L
#include "dpl.h"
#include "../host/dpl_internal.h"
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>
#include <stdio.h>

static int elem_size(int32_t code)
{
  switch (code) {
  case DPL_IDX_U8: case DPL_IDX_I8: return 1;
  case DPL_IDX_I16: return 2;
  case DPL_IDX_I32: case DPL_IDX_F32: return 4;
  case DPL_IDX_F64: return 8;
  default: return 0;
  }
}

static int read_exact(gzFile f, void *dst, size_t n, size_t *got)
{
  size_t done = 0;
  unsigned char *p = dst;
  while (done < n) {
    size_t chunk = n - done > (1u << 30) ? (1u << 30) : n - done;
    int r = gzread(f, p + done, (unsigned)chunk);
    if (r <= 0) break;
    done += (size_t)r;
  }
  *got = done;
  return done == n;
}

/* After a short read: an error for a .gz stream zlib found corrupt (a bad deflate block, a CRC
 * mismatch), which read as "truncated" before; 0 when it only ended early (Z_BUF_ERROR) or
 * there was no error. Call before gzclose. */
static int gz_corrupt(gzFile f, const char *path)
{
  int en = Z_OK;
  const char *msg = gzerror(f, &en);
  if (en == Z_OK || en == Z_BUF_ERROR) return 0;
  size_t pl = strlen(path);
  if (msg && !strncmp(msg, path, pl) && msg[pl] == ':' && msg[pl + 1] == ' ') msg += pl + 2; /* "<path>: why" */
  return dpl_errorf(DPL_EIO, "IDX file %s is corrupt: %s (gzip data error)", path,
                    msg && *msg ? msg : "unknown error");
}

static int open_idx(const char *path, gzFile *out)
{
  if (!path) return dpl_errorf(DPL_EINVAL, "dpl_idx: path is NULL");
  gzFile f = gzopen(path, "rb");
  if (!f) return dpl_errorf(DPL_EIO, "cannot open IDX file %s: %s", path, strerror(errno ? errno : ENOENT));
  gzbuffer(f, 1 << 17);
  *out = f;
  return DPL_OK;
}

static int parse_header(gzFile f, const char *path, dpl_idx_header *h)
{
  unsigned char m[4];
  size_t got;
  memset(h, 0, sizeof *h);
  if (!read_exact(f, m, 4, &got)) {
    int st = gz_corrupt(f, path);
    if (st) return st;
    return dpl_errorf(DPL_EIO, "IDX file %s is truncated: %zu of the 4 magic bytes", path, got);
  }
  if (m[0] != 0 || m[1] != 0 || !elem_size(m[2]) || m[3] < 1 || m[3] > 4)
    return dpl_errorf(DPL_EINVAL, "%s is not an IDX file: magic %02x %02x %02x %02x, expected 00 00 "
                      "<type 08/09/0b/0c/0d/0e> <1-4 dims>", path, m[0], m[1], m[2], m[3]);
  h->type_code = m[2];
  h->ndim = m[3];
  int64_t count = 1;
  for (int i = 0; i < h->ndim; i++) {
    unsigned char d[4];
    if (!read_exact(f, d, 4, &got)) {
      int st = gz_corrupt(f, path);
      if (st) return st;
      return dpl_errorf(DPL_EIO, "IDX file %s is truncated in its header (dimension %d of %d)", path, i + 1,
                        (int)h->ndim);
    }
    h->dims[i] = ((int64_t)d[0] << 24) | ((int64_t)d[1] << 16) | ((int64_t)d[2] << 8) | d[3];
    if (h->dims[i] == 0 || count > INT64_MAX / 16 / h->dims[i])
      return dpl_errorf(DPL_EINVAL, "IDX file %s has a bad size %lld in dimension %d", path,
                        (long long)h->dims[i], i + 1);
    count *= h->dims[i];
  }
  h->count = count;
  h->elem_size = elem_size(h->type_code);
  return DPL_OK;
}

int dpl_idx_read_header(const char *path, dpl_idx_header *out)
{
  if (!out) return dpl_errorf(DPL_EINVAL, "dpl_idx_read_header: out is NULL");
  gzFile f = NULL;
  int st = open_idx(path, &f);
  if (st) return st;
  st = parse_header(f, path, out);
  gzclose(f);
  return st;
}

int dpl_idx_read(const char *path, dpl_idx_header *out, void *dst, int64_t dst_bytes)
{
  if (!out || !dst) return dpl_errorf(DPL_EINVAL, "dpl_idx_read: out and dst must not be NULL");
  gzFile f = NULL;
  int st = open_idx(path, &f);
  if (st) return st;
  st = parse_header(f, path, out);
  if (st) { gzclose(f); return st; }
  int64_t need = out->count * out->elem_size;
  if (dst_bytes != need) {
    gzclose(f);
    return dpl_errorf(DPL_EINVAL, "dpl_idx_read: %s holds %lld bytes of data, the buffer has %lld", path,
                      (long long)need, (long long)dst_bytes);
  }
  size_t got;
  if (!read_exact(f, dst, (size_t)need, &got)) {
    st = gz_corrupt(f, path);
    gzclose(f);
    if (st) return st;
    return dpl_errorf(DPL_EIO, "IDX file %s is truncated: expected %lld bytes of data, got %zu", path,
                      (long long)need, got);
  }
  unsigned char extra;
  int more = gzread(f, &extra, 1);
  /* the gzip trailer's CRC is checked here, at the end of the stream: data that inflates but
   * does not match it was accepted */
  st = more < 0 ? gz_corrupt(f, path) : 0;
  gzclose(f);
  if (st) return st;
  if (more > 0)
    return dpl_errorf(DPL_EINVAL, "IDX file %s has trailing bytes after its %lld elements", path,
                      (long long)out->count);
  /* big-endian payload to host order */
  int es = out->elem_size;
  if (es > 1) {
    unsigned char *p = dst;
    for (int64_t i = 0; i < out->count; i++, p += es)
      for (int a = 0, b = es - 1; a < b; a++, b--) {
        unsigned char t = p[a]; p[a] = p[b]; p[b] = t;
      }
  }
  return DPL_OK;
}

int dpl_idx_stat(const char *path, int64_t *size, int64_t *mtime_ns)
{
  if (!path || !size || !mtime_ns) return dpl_errorf(DPL_EINVAL, "dpl_idx_stat: arguments must not be NULL");
  struct stat sb;
  if (stat(path, &sb) != 0) return dpl_errorf(DPL_EIO, "cannot stat %s: %s", path, strerror(errno));
  *size = (int64_t)sb.st_size;
  *mtime_ns = (int64_t)sb.st_mtim.tv_sec * 1000000000 + (int64_t)sb.st_mtim.tv_nsec;
  return DPL_OK;
}

int dpl_idx_check_size(const char *path, const dpl_idx_header *h)
{
  if (!path || !h) return dpl_errorf(DPL_EINVAL, "dpl_idx_check_size: arguments must not be NULL");
  int64_t want = 4 + 4 * (int64_t)h->ndim + h->count * h->elem_size;
  FILE *f = fopen(path, "rb");
  if (!f) return dpl_errorf(DPL_EIO, "cannot open IDX file %s: %s", path, strerror(errno));
  unsigned char m[2] = {0, 0};
  size_t got = fread(m, 1, 2, f);
  if (got == 2 && m[0] == 0x1f && m[1] == 0x8b) {
    /* gzip: ISIZE, the last 4 bytes, is the uncompressed size mod 2^32 (of the last member) */
    unsigned char t[4];
    int ok = fseek(f, -4, SEEK_END) == 0 && fread(t, 1, 4, f) == 4;
    fclose(f);
    if (!ok) return dpl_errorf(DPL_EIO, "IDX file %s is truncated: no gzip trailer", path);
    uint32_t isize = (uint32_t)t[0] | ((uint32_t)t[1] << 8) | ((uint32_t)t[2] << 16) | ((uint32_t)t[3] << 24);
    if (isize != (uint32_t)want) return 1; /* truncated, or several gzip members: decompress to know */
    return DPL_OK;
  }
  int ok = fseek(f, 0, SEEK_END) == 0;
  long end = ok ? ftell(f) : -1;
  fclose(f);
  if (end < 0) return dpl_errorf(DPL_EIO, "cannot read the size of IDX file %s", path);
  if ((int64_t)end < want)
    return dpl_errorf(DPL_EIO, "IDX file %s is truncated: expected %lld bytes of data, got %lld", path,
                      (long long)(want - 4 - 4 * h->ndim), (long long)(end - 4 - 4 * h->ndim));
  if ((int64_t)end > want)
    return dpl_errorf(DPL_EINVAL, "IDX file %s has trailing bytes after its %lld elements", path, (long long)h->count);
  return DPL_OK;
}

static void scale_row(float *restrict o, const uint8_t *restrict s, int64_t n)
{
  for (int64_t j = 0; j < n; j++) o[j] = (float)s[j] / 255.0f;
}

int dpl_idx_gather_u8(const uint8_t *src, int64_t rows, int64_t row_len, const int64_t *idx, int64_t n,
                      const float *lut, float *out)
{
  if (!src || !idx || !lut || !out || rows < 0 || row_len < 0 || n < 0)
    return dpl_errorf(DPL_EINVAL, "dpl_idx_gather_u8: bad arguments");
  for (int64_t i = 0; i < n; i++)
    if (idx[i] < 1 || idx[i] > rows)
      return dpl_errorf(DPL_EINVAL, "index %lld out of range 1..%lld", (long long)idx[i], (long long)rows);
  /* the usual table, x / 255 in float32 (what datasets.FashionMNIST builds): computed
   * (the same correctly rounded division) by a loop that vectorises, instead of one
   * table load per byte */
  static _Thread_local float seen[256]; /* the last table checked, and what it was */
  static _Thread_local int seen_ok, seen_div255;
  int div255;
  if (seen_ok && !memcmp(seen, lut, sizeof seen)) div255 = seen_div255;
  else {
    div255 = 1;
    for (int v = 0; v < 256 && div255; v++) div255 = lut[v] == (float)v / 255.0f;
    memcpy(seen, lut, sizeof seen);
    seen_ok = 1;
    seen_div255 = div255;
  }
  /* rows are random in a big array: fetch the row after next while this one converts */
  for (int64_t i = 0; i < n && i < 2; i++)
    for (int64_t j = 0; j < row_len; j += 64) __builtin_prefetch(src + (idx[i] - 1) * row_len + j);
  for (int64_t i = 0; i < n; i++) {
    const uint8_t *s = src + (idx[i] - 1) * row_len;
    if (i + 2 < n)
      for (int64_t j = 0; j < row_len; j += 64) __builtin_prefetch(src + (idx[i + 2] - 1) * row_len + j);
    float *o = out + i * row_len;
    if (div255) scale_row(o, s, row_len);
    else for (int64_t j = 0; j < row_len; j++) o[j] = lut[s[j]];
  }
  return DPL_OK;
}
