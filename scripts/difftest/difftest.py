#!/usr/bin/python3
"""Randomized differential test of dplhost's PyTorch-like tensor methods against PyTorch 1.13.

    /usr/bin/python3 scripts/difftest/difftest.py [--seed S] [--n N] [--groups sort,shape,index,math,autograd]
                                                   [--ops sort,topk] [--show] [--case ID] [--keep DIR]

Generates N random cases per group (random shapes: 0-d, empty, size-1 and large dims; all
dtypes; non-contiguous inputs through view chains; random dims, negative too, and optional
arguments), runs them in ./dplhost (scripts/difftest/runner.lua) and in torch, and compares
outputs (dtypes, shapes, values), error vs no error, gradients (float64 inputs, loss
sum(out * W) with a random W), and in-place semantics (the same object returned, the base of
a view written through, sources overlapping self read first, version counters). Differences
that docs/tensors.md documents are counted apart (see KNOWN in groups.py). Exit status 1 when
any unexplained discrepancy is left.
"""
import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import traceback

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from core import L, R, TNAME, Inp, lua  # noqa: E402
from compare import Case, reference, grad_reference, dec, cmp_one, torch_inputs  # noqa: E402
import groups  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..'))
RUNNER = os.path.join(ROOT, 'scripts', 'difftest', 'runner.lua')


def emit(case):
    names = 'abcdefgh'[:len(case.inputs)]
    bases = ', '.join(i.lua_base() for i in case.inputs)
    views = ', '.join('V(b[%d], %s)' % (k + 1, i.lua_chain()) for k, i in enumerate(case.inputs))
    body = case.lua_expr if getattr(case, 'lua_body', False) else 'return ' + case.lua_expr
    s = ['C[#C + 1] = { id = %d,  -- %s' % (case.id, case.op),
         '  mk = function() return { %s } end,' % bases,
         '  vw = function(b) return %s end,' % (views or ''),
         '  fn = function(%s)\n    %s\n  end,' % (', '.join(names), body)]
    if case.inplace:
        s.append('  inplace = true,')
    if case.grad and case.W is not None:
        W = Inp('float64', list(case.W.shape), [float(x) for x in case.W.reshape(-1).tolist()])
        s.append('  grad = { leaves = %s, out = %d, clone = %s, W = function() return %s end },' % (
            lua([k + 1 for k in case.grad]), case.grad_out + 1, lua(case.grad_clone), W.lua_base()))
    s.append('}')
    return '\n'.join(s)


def prepare(case, rng):
    ref = reference(case)
    if case.grad:
        if isinstance(ref, Exception) or case.ref_upcast:
            case.grad = None
            return
        o = ref[case.grad_out]
        if isinstance(o, L):
            o = o[0] if len(o) else None
        if not isinstance(o, torch.Tensor) or o.dtype != torch.float64:
            case.grad = None
            return
        case.W = torch.tensor(rng.values('float64', o.numel(), 'normal'), dtype=torch.float64).reshape(o.shape)
        case.grad_ref = grad_reference(case)


def run_dplhost(cases, keep=None, timeout=600, batch=250):
    """Runs the cases in ./dplhost, batch by batch (a Lua chunk holds at most 65536 constants);
    -> {id: result dict}. A crash is reported for its case, and the rest of the batch reruns."""
    results = {}
    for k in range(0, len(cases), batch):
        results.update(run_batch(cases[k:k + batch], keep, timeout))
    return results


def run_batch(cases, keep=None, timeout=600):
    d = keep or tempfile.mkdtemp(prefix='difftest-')
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, 'batch.lua')
    with open(path, 'w') as f:
        f.write('dofile(%s)\nlocal dpl = require \'dpl\'\nlocal nan, inf, nz = 0/0, math.huge, -1/math.huge\n'
                'local C = {}\n' % lua(RUNNER))
        for c in cases:
            f.write(emit(c) + '\n')
        f.write('RUN(C)\n')
    results = {}
    pos = {c.id: i for i, c in enumerate(cases)}
    start = 0  # 0-based position in the batch
    while start < len(cases):
        env = dict(os.environ, DIFF_START=str(start + 1), DPL_NUM_THREADS=os.environ.get('DPL_NUM_THREADS', '2'))
        try:
            p = subprocess.run([os.path.join(ROOT, 'dplhost'), path], cwd=ROOT, env=env, capture_output=True,
                               timeout=timeout)
            out, err, rc = p.stdout.decode('utf-8', 'replace'), p.stderr.decode('utf-8', 'replace'), p.returncode
        except subprocess.TimeoutExpired as e:
            out, err, rc = (e.stdout or b'').decode('utf-8', 'replace'), 'timeout', -9
        last = start - 1
        for line in out.splitlines():
            if not line.startswith('{'):
                continue
            try:
                j = json.loads(line)
            except ValueError:
                continue
            results[j['id']] = j
            last = pos[j['id']]
        if last >= len(cases) - 1:
            break
        if last == start - 1 and ('batch.lua:' in err.split('\n')[0] and 'constants' in err or rc == 0):
            raise RuntimeError('dplhost failed to run %s: %s' % (path, err[-3000:]))
        crashed = last + 1
        cid = cases[crashed].id
        results[cid] = {'id': cid, 'crash': 'exit %s: %s' % (rc, err[-2000:])}
        start = crashed + 1
    if not keep:
        shutil.rmtree(d, ignore_errors=True)
    return results


def check_select(case, res_out, ins):
    """Selections with ties: dplhost's indices may differ from torch's when they point at equal
    values. True when dplhost's values equal torch's and the input at dplhost's indices holds them."""
    vi, ii, dim, keepdim = case.select
    try:
        v = dec(res_out[vi])[2]
        i = dec(res_out[ii])[2] - 1
        ref_v = case.ref[vi]
        if cmp_one(dec(res_out[vi]), ref_v, case.tol):
            return False
        x = ins[0].detach()
        if x.dim() == 0:
            x = x.reshape(1)
            i = i.reshape(1) if i.dim() == 0 else i
            v = v.reshape(1) if v.dim() == 0 else v
            dim = 0
        if not keepdim:
            i, v = i.unsqueeze(dim), v.unsqueeze(dim)
        g = x.double().gather(dim, i)
        vv = v.double()
        return bool(((g == vv) | (torch.isnan(g) & torch.isnan(vv))).all())
    except Exception:  # noqa
        traceback.print_exc()
        return False


def judge(case, res):
    """-> (status, message): ok | err-agree | doc | tie | upcast-ok | MISMATCH | CRASH."""
    ref = case.ref
    if 'crash' in res:
        return 'CRASH', res['crash']
    if 'setup_err' in res or 'runner_err' in res:
        return 'MISMATCH', 'setup: %s' % (res.get('setup_err') or res.get('runner_err'))
    terr = isinstance(ref, Exception)
    derr = 'err' in res
    doc = case.doc(case, ref if terr else None, res) if case.doc else None
    if terr and not derr and not doc:
        doc = groups.doc_torch_bug(case, ref, res)
    if not doc:
        doc = groups.doc_torch_output_bug(case, ref if terr else None, res)
    if (terr or case.ref_upcast) and derr:
        return 'err-agree', ''
    if derr:
        if doc:
            return 'doc', doc
        return 'MISMATCH', 'dplhost raised, torch did not: %s' % res['err']['msg']
    if terr:
        if doc:
            return 'doc', doc
        return 'MISMATCH', 'torch raised, dplhost did not: %s' % str(ref).split('\n')[0][:300]
    outs = res['out']
    if len(outs) != len(ref):
        return 'MISMATCH', '%d outputs vs %d' % (len(outs), len(ref))
    status = 'upcast-ok' if case.ref_upcast else 'ok'
    tol = case.tol
    if case.ref_upcast and tol is None:
        tol = 3e-2  # (torch computed in float32 and rounded once; dplhost may round each step to 16 bits)
    for k, (d, r) in enumerate(zip(outs, ref)):
        m = cmp_one(dec(d), r, tol, 'out%d' % (k + 1))
        if m:
            if case.select:
                _, _, ins = torch_inputs(case)
                if check_select(case, outs, ins):
                    status = 'tie'
                    break
            if doc:
                return 'doc', doc + ' (' + m + ')'
            return 'MISMATCH', m
    if case.inplace:
        if not res.get('same'):
            return 'MISMATCH', 'in-place op did not return self'
        if case.ref_base is not None:
            m = cmp_one(dec(res['base']), case.ref_base, case.tol, 'base')
            if m:
                return 'MISMATCH', m
    if case.grad and case.W is not None:
        gref = case.grad_ref
        if isinstance(gref, Exception):
            if 'grad_err' not in res:
                gd = case.grad_doc(case) if case.grad_doc else None
                gd = gd or groups.grad_doc_torch_bug(case, gref)
                if gd:
                    return 'doc', gd
                return 'MISMATCH', 'grad: torch raised, dplhost did not: %s' % str(gref).split('\n')[0][:300]
        elif 'grad_err' in res:
            return 'MISMATCH', 'grad: dplhost raised: %s' % res['grad_err']['msg']
        else:
            for k, (d, r) in enumerate(zip(res['grads'], gref)):
                if r is None and d is None:
                    continue
                if r is None:
                    r = torch.zeros_like(case.inputs[case.grad[k]].base(), dtype=torch.float64)
                if d is None:
                    return 'MISMATCH', 'grad %d: dplhost gave none' % (k + 1)
                m = cmp_one(dec(d), r, 1e-7, 'grad%d' % (k + 1))
                if m:
                    gd = case.grad_doc(case) if case.grad_doc else None
                    gd = gd or groups.grad_doc_torch_bug(case, gref)
                    if gd:
                        return 'doc', gd
                    return 'MISMATCH', m
    return status, ''


def describe(case):
    ins = []
    for k, i in enumerate(case.inputs):
        ins.append('%s: %s base %s chain %s -> %s vals %s' % (
            'abcdefgh'[k], i.dtype, i.shape, i.chain, i.out_shape(),
            (i.vals[:12] + ['...']) if len(i.vals) > 12 else i.vals))
    return '\n      '.join(ins)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--n', type=int, default=300, help='cases per group')
    ap.add_argument('--groups', default='sort,shape,index,math,autograd')
    ap.add_argument('--ops', default=None, help='only these ops (comma-separated)')
    ap.add_argument('--case', type=int, default=None, help='only this case id (with the same seed and options)')
    ap.add_argument('--show', action='store_true', help='print the Lua and Python of every mismatch')
    ap.add_argument('--keep', default=None, help='write the batch file here')
    ap.add_argument('--max-show', type=int, default=40)
    ap.add_argument('--brief', action='store_true', help='one line per discrepancy')
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    ops = set(a.ops.split(',')) if a.ops else None
    cases = []
    for g in a.groups.split(','):
        rng = R(a.seed * 1000 + hash(g) % 1000 if False else a.seed * 7919 + sum(map(ord, g)))
        n = 0
        tries = 0
        while n < a.n and tries < a.n * 50:
            tries += 1
            c = groups.GEN[g](rng, ops)
            if c is None:
                continue
            c.id = len(cases) + 1
            cases.append(c)
            n += 1
    if a.case:
        cases = [c for c in cases if c.id == a.case]
        for c in cases:
            c.id = 1
    prng = R(a.seed + 17)
    for c in cases:
        prepare(c, prng)
    results = run_dplhost(cases, keep=a.keep)
    stats = collections.defaultdict(collections.Counter)
    bad = []
    docs, ups = collections.Counter(), collections.Counter()
    for c in cases:
        r = results.get(c.id, {'crash': 'no result'})
        st, msg = judge(c, r)
        stats[(c.group, c.op)][st] += 1
        stats[(c.group, '*')][st] += 1
        if st in ('MISMATCH', 'CRASH'):
            bad.append((c, st, msg))
        elif st == 'doc':
            docs[(c.op, msg.split(' (')[0])] += 1
        elif st == 'upcast-ok':
            ups[(c.op, '/'.join(i.dtype for i in c.inputs), str(c.ref_err).split('\n')[0][:70])] += 1
    print('%-10s %-20s %6s %6s %6s %6s %6s %6s %6s' % ('group', 'op', 'cases', 'ok', 'errs', 'tie', 'upcast',
                                                       'doc', 'BAD'))
    for (g, op), cnt in sorted(stats.items()):
        tot = sum(cnt.values())
        print('%-10s %-20s %6d %6d %6d %6d %6d %6d %6d' % (g, op, tot, cnt['ok'], cnt['err-agree'], cnt['tie'],
                                                         cnt['upcast-ok'], cnt['doc'],
                                                         cnt['MISMATCH'] + cnt['CRASH']))
    if docs:
        print('\ndocumented differences seen:')
        for (op, m), n in sorted(docs.items()):
            print('  %-16s %4d  %s' % (op, n, m))
    if ups:
        print('\ntorch 1.13 lacks the kernel, compared with torch on float32/uint8 inputs:')
        for (op, dts, m), n in sorted(ups.items()):
            print('  %-16s %-24s %4d  %s' % (op, dts, n, m))
    for c, st, msg in bad[:a.max_show]:
        if a.brief:
            print('%s #%d %s/%s: %s  [%s]' % (st, c.id, c.group, c.op, msg[:150], c.note))
            continue
        print('\n%s #%d %s/%s: %s%s' % (st, c.id, c.group, c.op, msg, ('  [' + c.note + ']') if c.note else ''))
        print('    lua: %s' % c.lua_expr.replace('\n', '\n         '))
        print('    py:  %s' % c.py_expr.replace('\n', '\n         '))
        print('      ' + describe(c))
        if a.show:
            print(emit(c))
    if len(bad) > a.max_show:
        print('\n... %d more' % (len(bad) - a.max_show))
    print('\n%d cases, %d discrepancies' % (len(cases), len(bad)))
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
