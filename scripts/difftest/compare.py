"""Evaluating the torch side of a case and comparing it with dplhost's JSON result."""
import math
import re

import torch
import torch.nn.functional as F

from core import L, TD, TNAME, Inp

RTOL = {'float64': 1e-9, 'float32': 2e-5, 'float16': 2e-3, 'bfloat16': 1.6e-2}


class Case:
    def __init__(self, group, op, inputs, lua_expr, py_expr, **kw):
        self.group, self.op, self.inputs = group, op, inputs
        self.lua_expr, self.py_expr = lua_expr, py_expr
        self.inplace = kw.get('inplace', False)  # the op returns its first input (check it, and the base after)
        self.grad = kw.get('grad')  # list of input positions (float64) to differentiate
        self.grad_out = kw.get('grad_out', 0)
        self.grad_clone = kw.get('grad_clone', False)
        self.select = kw.get('select')  # (values output, indices output, dim, keepdim): ties may pick other indices
        self.tol = kw.get('tol')  # a relative tolerance override
        self.unordered = kw.get('unordered', False)
        self.note = kw.get('note', '')
        self.doc = kw.get('doc')  # a predicate (case, torch error) -> str: a documented difference
        self.upcast = kw.get('upcast', True)
        self.grad_doc = kw.get('grad_doc')  # a predicate (case) -> str: a documented gradient difference
        self.lua_body = kw.get('lua_body', False)  # lua_expr is a function body (statements, return)
        self.py_body = kw.get('py_body', False)  # py_expr is a function body
        self.W = None
        self.ref = None


def torch_env():
    def S(r):
        return [r[0], r[1] + 1]
    def DT(t):  # dtype and shape only (new_empty)
        return [TNAME[t.dtype], L(t.shape)]
    return {'torch': torch, 'F': F, 'L': L, 'S': S, 'DT': DT, 'math': math, 'inf': math.inf, 'nan': math.nan}


def run_torch(case, inputs, grad=False):
    env = torch_env()
    names = 'abcdefgh'
    for i, t in enumerate(inputs):
        env[names[i]] = t
    if case.py_body:
        src = 'def _f(a=None, b=None, c=None, d=None, e=None, f=None, g=None, h=None):\n' + '\n'.join(
            '    ' + ln for ln in case.py_expr.split('\n'))
        exec(src, env)
        r = env['_f'](*inputs)
    else:
        r = eval(case.py_expr, env)
    if isinstance(r, tuple) and not isinstance(r, L):
        r = list(r)
    if not isinstance(r, list) or isinstance(r, L):
        r = [r]
    return r


def torch_inputs(case, up=None, leaves=()):
    bases = [i.base() for i in case.inputs]
    if up:
        bases = [b.to(up[b.dtype]) if b.dtype in up else b for b in bases]
    b2 = list(bases)
    for k in leaves:
        bases[k].requires_grad_()
        if case.grad_clone:
            b2[k] = bases[k].clone()
    ins = [Inp.apply(b, i.chain) for b, i in zip(b2, case.inputs)]
    # int32 indices: dplhost takes them as int64 (documented); torch wants int64
    ins = [t.long() if i.index and t.dtype == torch.int32 else t for t, i in zip(ins, case.inputs)]
    return bases, b2, ins


UNIMPL = re.compile(r"not implemented for '(Half|BFloat16|Bool|Byte|Char|Int|Long)'|"
                    r'"\w+" not implemented for|does not support (half|bool)|'
                    r'only supports floating|not supported for (Half|BFloat16)')


def reference(case):
    """torch's outputs (list), or an exception; retried on float32/uint8 when torch 1.13 lacks a
    kernel for the dtype (case.ref_upcast is then set)."""
    case.ref_upcast = False
    try:
        _, b2, ins = torch_inputs(case)
        case.ref = run_torch(case, ins)
        case.ref_base = b2[0] if case.inplace else None
    except Exception as e:  # noqa
        case.ref = e
        if case.upcast and UNIMPL.search(str(e)):
            up = {torch.float16: torch.float32, torch.bfloat16: torch.float32, torch.bool: torch.uint8}
            try:
                _, bases, ins = torch_inputs(case, up)
                r = run_torch(case, ins)
                back = {}
                for t in case.inputs:
                    if TD[t.dtype] in up:
                        back[up[TD[t.dtype]]] = TD[t.dtype]
                case.ref = [_cast_back(x, back) for x in r]
                case.ref_upcast = True
                case.ref_err = e
                case.ref_base = _cast_back(bases[0], back) if case.inplace else None
            except Exception:  # noqa
                pass
    return case.ref


def _cast_back(x, back):
    if isinstance(x, torch.Tensor) and x.dtype in back:
        return x.to(back[x.dtype])
    if isinstance(x, L):
        return L(_cast_back(y, back) for y in x)
    if isinstance(x, list):
        return [_cast_back(y, back) for y in x]
    return x


def grad_reference(case, expr=None):
    """torch's gradients of the grad leaves for loss = sum(out * W), or an exception. Where torch
    1.13 has no derivative for an in-place form (acosh_, asinh_, atanh_), the out-of-place op's
    gradient is the reference (case.grad_ref_outofplace)."""
    try:
        bases, _, ins = torch_inputs(case, leaves=case.grad)
        r = run_torch(case, ins)
        o = r[case.grad_out]
        if isinstance(o, L):
            o = o[0]
        (o * case.W).sum().backward()
        return [bases[k].grad for k in case.grad]
    except Exception as e:  # noqa
        if "derivative for 'inplace version of" in str(e) and not getattr(case, 'grad_ref_outofplace', False):
            import re as _re
            saved = case.py_expr
            case.py_expr = _re.sub(r'a\.(\w+)_\(\)', r'torch.\1(a)', saved)
            case.grad_ref_outofplace = True
            try:
                return grad_reference(case)
            finally:
                case.py_expr = saved
        return e


# ------------------------------------------------------------------------------------ compare
def dec_tensor(j):
    dt = j['dtype']
    shape = j['shape']
    vals = j['v']
    if dt == 'bool':
        t = torch.tensor([bool(v) for v in vals], dtype=torch.bool)
    elif dt == 'int64':
        t = torch.tensor([int(v) for v in vals], dtype=torch.int64)
    elif dt in ('int32', 'uint8'):
        t = torch.tensor([int(v) for v in vals], dtype=torch.int64).to(TD[dt])
    else:
        t = torch.tensor([float(v) for v in vals], dtype=torch.float64)
    return dt, t.reshape(shape)


def dec(j):
    if isinstance(j, dict) and 'dtype' in j:
        dt, t = dec_tensor(j)
        return ('T', dt, t)
    if isinstance(j, dict) and 'list' in j:
        return ('L', [dec(x) for x in j['list']])
    return ('V', j)


def close(a, b, dt, tol=None):
    """a: dplhost's values (float64 or exact), b: torch's (converted). -> None or a message."""
    if a.shape != b.shape:
        return 'shape %s vs %s' % (list(a.shape), list(b.shape))
    if a.numel() == 0:
        return None
    if dt in RTOL:
        a64, b64 = a.double(), b.double()
        na, nb = torch.isnan(a64), torch.isnan(b64)
        if not torch.equal(na, nb):
            i = (na != nb).nonzero()[0].tolist()
            return 'NaN mismatch at %s: %s vs %s' % (i, a64[tuple(i)].item(), b64[tuple(i)].item())
        a64, b64 = a64.masked_fill(na, 0), b64.masked_fill(nb, 0)
        inf_a, inf_b = torch.isinf(a64), torch.isinf(b64)
        at_abs = 0.0
        if isinstance(tol, tuple):  # (rtol, absolute tolerance): sums with cancellation
            tol, at_abs = tol
        rt = tol or RTOL[dt]
        fin = ~(inf_a | inf_b)
        bad = (inf_a | inf_b) & (a64 != b64)
        scale = b64[fin].abs().max().item() if fin.any() else 1.0
        at = rt * max(scale, 1e-30) * 1e-3 + (1e-300 if dt == 'float64' else 0) + at_abs
        diff = (a64 - b64).abs()
        bad |= fin & (diff > at + rt * b64.abs())
        if bad.any():
            i = bad.nonzero()[0].tolist()
            return 'value at %s: %r vs %r (max diff %.3g)' % (i, a64[tuple(i)].item(), b64[tuple(i)].item(),
                                                             diff[fin].max().item() if fin.any() else 0)
        return None
    if not torch.equal(a.to(b.dtype) if a.dtype != b.dtype else a, b):
        ne = (a.to(torch.int64) != b.to(torch.int64)).nonzero()
        i = ne[0].tolist() if len(ne) else []
        return 'value at %s: %s vs %s' % (i, a[tuple(i)].item() if i or a.dim() == 0 else '?',
                                         b[tuple(i)].item() if i or b.dim() == 0 else '?')
    return None


def cmp_one(d, r, tol=None, path='out'):
    """d: decoded dplhost output, r: torch value -> None or a message."""
    if isinstance(r, torch.Tensor):
        if d[0] != 'T':
            return '%s: dplhost gave %s, torch a tensor' % (path, d[0])
        _, dt, t = d
        rdt = TNAME[r.dtype]
        if dt != rdt:
            return '%s: dtype %s vs %s' % (path, dt, rdt)
        r = r.detach()
        if list(t.shape) != list(r.shape):
            return '%s: shape %s vs %s' % (path, list(t.shape), list(r.shape))
        m = close(t, r.double() if dt in RTOL else r.to(torch.int64) if dt != 'bool' else r, dt, tol)
        return m and '%s: %s' % (path, m)
    if isinstance(r, (L, list, tuple)):
        if d[0] != 'L':
            return '%s: dplhost gave %s, torch a list' % (path, d[0])
        if len(d[1]) != len(r):
            return '%s: %d items vs %d' % (path, len(d[1]), len(r))
        for k, (x, y) in enumerate(zip(d[1], r)):
            m = cmp_one(x, y, tol, '%s[%d]' % (path, k + 1))
            if m:
                return m
        return None
    # a Python scalar
    if d[0] != 'V':
        return '%s: dplhost gave %s, torch a %s' % (path, d[0], type(r).__name__)
    v = d[1]
    if isinstance(r, bool) or isinstance(v, bool):
        return None if v == r else '%s: %r vs %r' % (path, v, r)
    if isinstance(r, str):
        return None if v == r else '%s: %r vs %r' % (path, v, r)
    if isinstance(r, (int, float)):
        if (v != v and r != r) or v == r or abs(v - r) <= 1e-9 * abs(r):
            return None
        return '%s: %r vs %r' % (path, v, r)
    return '%s: cannot compare %r with %r' % (path, v, r)


def int_compat(t):
    return t.to(torch.int64) if t.dtype in (torch.int32, torch.uint8) else t
