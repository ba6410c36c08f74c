"""Core of the randomized differential test of dplhost against PyTorch 1.13.

A case is an op call written twice: a Lua expression over the inputs a, b, c, ... (1-based
dims and indices, as dplhost takes them) and a Python expression over the same inputs as
torch tensors (0-based). Inputs are random tensors (dtype, shape, values) reached through a
chain of view ops (transpose, narrow, expand, stepped and diagonal views, permute), built the
same way on both sides. difftest.py writes a batch of cases as a Lua file for
scripts/difftest/runner.lua, runs ./dplhost on it, evaluates the Python side and compares
outputs (dtype, shape, values), errors, gradients and in-place semantics.
"""
import math
import random

import torch

DTYPES = ['float32', 'float64', 'float16', 'bfloat16', 'int32', 'int64', 'uint8', 'bool']
FLOATS = ['float32', 'float64', 'float16', 'bfloat16']
INTS = ['int32', 'int64', 'uint8']
TD = {n: getattr(torch, n) for n in DTYPES}
TNAME = {v: k for k, v in TD.items()}


class L(list):
    """A Lua list-table output (chunk, split, unbind): one output holding tensors."""


class Inp:
    """A tensor input: base (dtype, shape, flat values) and a chain of view ops (0-based)."""

    def __init__(self, dtype, shape, vals, chain=(), index=False):
        self.dtype, self.shape, self.vals, self.chain = dtype, list(shape), list(vals), list(chain)
        self.index = index  # values are 0-based indices (Lua gets them +1 when >= 0)

    # torch side ---------------------------------------------------------------
    def base(self):
        if self.dtype == 'int64':
            t = torch.tensor([int(v) for v in self.vals], dtype=torch.int64)
        else:
            t = torch.tensor([float(v) for v in self.vals], dtype=torch.float64).to(TD[self.dtype])
        return t.reshape(self.shape)

    @staticmethod
    def apply(t, chain):
        for c in chain:
            op = c[0]
            if op == 'transpose':
                t = t.transpose(c[1], c[2])
            elif op == 'narrow':
                t = t.narrow(c[1], c[2], c[3])
            elif op == 'expand':
                t = t.expand(*c[1])
            elif op == 'unfold':
                t = t.unfold(c[1], c[2], c[3])
            elif op == 'select':
                t = t.select(c[1], c[2])
            elif op == 'diagonal':
                t = t.diagonal(c[1], c[2], c[3])
            elif op == 'permute':
                t = t.permute(*c[1])
            elif op == 'clone':
                t = t.clone()
            elif op == 'view':
                t = t.view(*c[1])
            else:
                raise ValueError(op)
        return t

    def torch(self):
        return Inp.apply(self.base(), self.chain)

    # Lua side -----------------------------------------------------------------
    def lua_base(self):
        vals = self.vals
        if self.index:
            vals = [v + 1 if v >= 0 else v for v in vals]
        if self.dtype == 'int64' and any(abs(int(v)) > 2 ** 53 for v in vals):
            return 'TI(%s, {%s})' % (lua(self.shape), ','.join('"%d"' % int(v) for v in vals))
        return "T('%s', %s, {%s})" % (self.dtype, lua(self.shape), ','.join(luanum(v) for v in vals))

    def lua_chain(self):
        parts = []
        for c in self.chain:
            op = c[0]
            if op == 'transpose':
                parts.append("{'transpose', %d, %d}" % (c[1] + 1, c[2] + 1))
            elif op == 'narrow':
                parts.append("{'narrow', %d, %d, %d}" % (c[1] + 1, c[2] + 1, c[3]))
            elif op == 'expand':
                parts.append("{'expand', %s}" % lua(list(c[1])))
            elif op == 'unfold':
                parts.append("{'unfold', %d, %d, %d}" % (c[1] + 1, c[2], c[3]))
            elif op == 'select':
                parts.append("{'select', %d, %d}" % (c[1] + 1, c[2] + 1))
            elif op == 'diagonal':
                parts.append("{'diagonal', %d, %d, %d}" % (c[1], c[2] + 1, c[3] + 1))
            elif op == 'permute':
                parts.append("{'permute', %s}" % lua([p + 1 for p in c[1]]))
            elif op == 'clone':
                parts.append("{'clone'}")
            elif op == 'view':
                parts.append("{'view', %s}" % lua(list(c[1])))
        return '{' + ', '.join(parts) + '}'

    def numel(self):
        n = 1
        for s in self.shape:
            n *= s
        return n

    def out_shape(self):
        return list(self.torch().shape)


def luanum(v):
    if isinstance(v, bool):
        return 'true' if v else 'false'
    if isinstance(v, int):
        return str(v)
    if v != v:
        return 'nan'
    if v == math.inf:
        return 'inf'
    if v == -math.inf:
        return '-inf'
    if v == 0 and math.copysign(1, v) < 0:
        return 'nz'
    if v == int(v) and abs(v) < 2 ** 53:
        return str(int(v))
    return repr(float(v))


def lua(v):
    """A Python value as a Lua literal (lists and dicts as tables)."""
    if v is None:
        return 'nil'
    if isinstance(v, (bool, int, float)):
        return luanum(v)
    if isinstance(v, str):
        return "'" + v + "'"
    if isinstance(v, (list, tuple)):
        return '{' + ', '.join(lua(x) for x in v) + '}'
    if isinstance(v, dict):
        return '{' + ', '.join('%s = %s' % (k, lua(x)) for k, x in v.items()) + '}'
    raise TypeError(type(v))


def ldim(td):
    """A torch dim (any int, maybe out of range) as dplhost's 1-based dim."""
    return td + 1 if td >= 0 else td


class R(random.Random):
    """The generator of cases: random shapes, values, view chains."""

    def chance(self, p):
        return self.random() < p

    def shape(self, maxnd=4, maxsize=5, big=False, minnd=0):
        nd = self.randint(minnd, max(minnd, maxnd))
        s = []
        for _ in range(nd):
            r = self.random()
            s.append(0 if r < 0.06 else 1 if r < 0.2 else self.randint(2, maxsize))
        if big and nd > 0:
            s[self.randrange(nd)] = self.randint(800, 2500)
            n = 1
            for x in s:
                n *= x
            while n > 6000:
                i = max(range(nd), key=lambda k: s[k])
                s[i] = max(1, s[i] // 2)
                n = 1
                for x in s:
                    n *= x
        return s

    def values(self, dtype, n, kind=None):
        if dtype == 'bool':
            p = self.random()
            return [1 if self.random() < p else 0 for _ in range(n)]
        if dtype == 'uint8':
            hi = self.choice([3, 10, 255])
            return [self.randint(0, hi) for _ in range(n)]
        if dtype in ('int32', 'int64'):
            k = kind or self.choice(['small', 'small', 'mid', 'wide'])
            if k == 'small':
                return [self.randint(-4, 4) for _ in range(n)]
            if k == 'mid':
                return [self.randint(-1000, 1000) for _ in range(n)]
            if k == 'pos':
                return [self.randint(0, 6) for _ in range(n)]
            if dtype == 'int32':
                return [self.randint(-2 ** 31, 2 ** 31 - 1) for _ in range(n)]
            return [self.randint(-2 ** 62, 2 ** 62) for _ in range(n)]
        k = kind or self.choice(['normal', 'normal', 'normal', 'ties', 'special', 'wide'])
        out = []
        for _ in range(n):
            if k == 'ties':
                v = float(self.randint(-3, 3)) / self.choice([1, 2])
            elif k == 'special':
                r = self.random()
                v = (math.nan if r < 0.1 else math.inf if r < 0.17 else -math.inf if r < 0.24 else -0.0 if r < 0.3
                     else 0.0 if r < 0.35 else self.gauss(0, 2))
            elif k == 'wide':
                v = self.gauss(0, 1) * 10 ** self.randint(-6, 6)
            elif k == 'pos':
                v = abs(self.gauss(0, 2)) + 0.05
            elif k == 'unit':
                v = self.uniform(-0.95, 0.95)
            elif k == 'gt1':
                v = 1.05 + abs(self.gauss(0, 2))
            else:
                v = self.gauss(0, 2)
            out.append(v)
        # rounded to the dtype, so that both sides start from the same values
        t = torch.tensor(out, dtype=torch.float64).to(TD[dtype]).to(torch.float64)
        return [float(x) for x in t.tolist()]

    def chain_for(self, shape, expand=True, depth=None):
        """A base shape and a chain of view ops that give `shape` from it."""
        depth = self.choice([0, 0, 1, 1, 2]) if depth is None else depth
        steps = []
        cur = list(shape)
        for i in range(depth):
            opts = ['narrow', 'stepped', 'permute']
            if len(cur) >= 2:
                opts += ['transpose', 'transpose']
            if len(cur) >= 1 and cur[-1] > 0:
                opts.append('diagonal')
            if expand and i == 0 and any(s != 1 for s in cur):
                opts.append('expand')
            if not cur:
                break
            op = self.choice(opts)
            nd = len(cur)
            if op == 'transpose':
                d1, d2 = self.sample(range(nd), 2)
                prev = list(cur)
                prev[d1], prev[d2] = prev[d2], prev[d1]
                steps.append(('transpose', d1, d2))
            elif op == 'narrow':
                d = self.randrange(nd)
                extra = self.randint(1, 3)
                start = self.randint(0, extra)
                prev = list(cur)
                prev[d] += extra
                steps.append(('narrow', d, start, cur[d]))
            elif op == 'expand':
                prev = [1 if self.chance(0.5) else s for s in cur]
                lead = self.randint(0, min(2, nd))
                prev = prev[lead:]
                steps.append(('expand', tuple(cur)))
            elif op == 'stepped':
                d = self.randrange(nd)
                if cur[d] == 0:
                    continue
                step = self.randint(2, 3)
                prev = list(cur)
                prev[d] = (cur[d] - 1) * step + 1 + self.randint(0, step - 1)
                # unfold(d, 1, step) adds a last dim of 1; select drops it
                steps.append(('select', nd, 0))
                steps.append(('unfold', d, 1, step))
            elif op == 'diagonal':
                s = cur[-1]
                off = self.randint(-2, 2)
                if off >= 0:
                    prev = cur[:-1] + [s, s + off]
                else:
                    prev = cur[:-1] + [s - off, s]
                steps.append(('diagonal', off, nd - 1, nd))
            elif op == 'permute':
                perm = list(range(nd))
                self.shuffle(perm)
                # out[i] = prev[perm[i]]
                prev = [0] * nd
                for i2, p in enumerate(perm):
                    prev[p] = cur[i2]
                steps.append(('permute', tuple(perm)))
            cur = prev
        steps.reverse()
        n = 1
        for x in cur:
            n *= x
        if n > 60000:  # (diagonal and stepped views of a large tensor: too large a base)
            return list(shape), []
        return cur, steps

    def tensor(self, dtype=None, shape=None, kind=None, views=True, expand=True, big=False, maxnd=4, maxsize=5,
               minnd=0, dtypes=None):
        dtype = dtype or self.choice(dtypes or DTYPES)
        if shape is None:
            shape = self.shape(maxnd=maxnd, maxsize=maxsize, big=big, minnd=minnd)
        if views and self.chance(0.5):
            base, chain = self.chain_for(shape, expand=expand)
        else:
            base, chain = list(shape), []
        n = 1
        for s in base:
            n *= s
        return Inp(dtype, base, self.values(dtype, n, kind), chain)

    def index(self, shape, lo, hi, dtype='int64', views=True, unique_along=None):
        """An index tensor of `shape` with values in [lo, hi) (torch's 0-based)."""
        if views and self.chance(0.3):
            base, chain = self.chain_for(shape, expand=False)
        else:
            base, chain = list(shape), []
        n = 1
        for s in base:
            n *= s
        vals = [self.randint(lo, hi - 1) if hi > lo else lo for _ in range(n)]
        return Inp(dtype, base, vals, chain, index=True)

    def tdim(self, nd, bad=0.04):
        """A torch dim of a tensor of nd dims: in range (either sign) or, rarely, out of it."""
        n = max(nd, 1)
        if self.chance(bad):
            return self.choice([n, -n - 1])
        d = self.randrange(n)
        return d if self.chance(0.6) else d - n
