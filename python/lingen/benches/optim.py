"""The fused optimiser (issue 35): one AdamW step of a model's parameters.
lingen's row is lingen.optim.AdamW (one launch of the generated adamw
kernel per group and device); eager is torch.optim.AdamW with foreach=True
(torch's default on CUDA), and "torch fused" its fused=True CUDA kernel.
Each implementation steps its own copy of the same parameters and
gradients, so the first steps agree (the check compares lingen's second
step with eager's first: a step moves a parameter by about lr, so lr is
1e-5, far below the check's 1e-2 of a 1-element tensor's value; the time
does not depend on it).
Bytes moved: 28 a parameter (p, g, m, v read; p, m, v written), 20 with bf16
moments, 14 with bf16 parameters, gradients and moments (a bf16 model's
step: the training example's).
"adamw_fp8": the step of lingen.nn's FP8 weights with their FP8 copies
written in the same pass (lingen.optim.AdamW(fp8_weights=True), the adamw_fp8
kernel) against eager (torch.optim.AdamW, foreach=True: a bf16 weight's
moments in bf16, then each new weight's copies q, s, qt, st by the PyTorch
weight quantiser, lingen._torchref.weight) and the adamw step followed by the
forward's quantisation of each weight (lingen.nn's quant_weight:
fp8_quant_weight). Each returns every weight and its four copies; compared:
the weights and both copies dequantised. 16 bytes a parameter (bf16 p, g, m,
v; q and qt; the copies counted as outputs)."""
import dataclasses

from . import Case, Setup

LR = 1e-5
SHAPES = [(2048, 2048), (512, 2048), (2048,), (1024, 2048), (2048, 256), (128,), (1,)]


def _params(env, total, shapes, dtype):
    ps, n = [], 0
    while n < total:
        p = env.randn(*shapes[len(ps) % len(shapes)], dtype=dtype)
        ps.append(p)
        n += p.numel()
    return ps


def _case(total, moments="fp32", shapes=SHAPES, bf16=False):
    def make(env):
        torch = env.torch
        import lingen.optim
        dt = torch.bfloat16 if bf16 else torch.float32
        base = _params(env, total, shapes, dt)
        grads = [env.randn(*p.shape, dtype=dt) * 1e-3 for p in base]

        def copy():
            ps = [torch.nn.Parameter(p.clone()) for p in base]
            for p, g in zip(ps, grads):
                p.grad = g
            return ps

        def stepper(opt, ps):
            def run():
                opt.step()
                return ps
            return run

        ours, eager, fused = copy(), copy(), copy()
        impls = {"lingen": stepper(lingen.optim.AdamW(ours, lr=LR, moments=moments), ours),
                 "eager": stepper(torch.optim.AdamW(eager, lr=LR, foreach=True), eager)}
        if moments == "fp32" or bf16:  # torch keeps a bf16 parameter's moments in bf16
            impls["torch fused"] = stepper(torch.optim.AdamW(fused, lr=LR, fused=True), fused)
        # p and g read, m and v read and written (the result, p, is counted as written)
        mdt = torch.bfloat16 if moments == "bf16" else torch.float32
        moments_rw = tuple(torch.empty(4 * p.numel(), dtype=mdt, device="meta") for p in base)
        moved = tuple(base) + tuple(grads) + moments_rw
        # a snapshot: the parameters go on moving with every timed step
        return Setup(impls, moved, lambda ps: tuple(p.detach().clone() for p in ps))
    return make


FP8_SHAPES = [(2048, 2048), (1024, 2048), (2048, 512), (3072, 2048)]


def _dequant_weights(torch, r):
    """(p, q, s, qt, st) a weight, flat -> (p, q's values, qt's values) a
    weight, fp32 (copies of the step's buffers, rewritten by the next)."""
    from lingen import _torchref as Q
    out = []
    for i in range(0, len(r), 5):
        p, q, s, qt, st = r[i:i + 5]
        out += [p.detach().float().clone(), Q.deq_weight(q, s), Q.deq_weight(qt, st)]
    return tuple(out)


def _case_fp8(total, shapes=FP8_SHAPES):
    def make(env):
        torch = env.torch
        import lingen.optim
        from lingen import _torchref as Q
        from lingen.nn import _k
        base = _params(env, total, shapes, torch.bfloat16)
        grads = [env.randn(*p.shape, dtype=torch.bfloat16) * 1e-3 for p in base]

        def copy():
            ps = [_k.mark_fp8(torch.nn.Parameter(p.clone())) for p in base]
            for p, g in zip(ps, grads):
                p.grad = g
            return ps

        fused_ps, plain_ps, eager_ps = copy(), copy(), copy()
        fused = lingen.optim.AdamW(fused_ps, lr=LR, moments="bf16", fp8_weights=True)
        plain = lingen.optim.AdamW(plain_ps, lr=LR, moments="bf16")
        eager = torch.optim.AdamW(eager_ps, lr=LR, foreach=True)  # bf16 p: bf16 m, v

        def run_fused():  # the copies the step wrote
            fused.step()
            return [t for p in fused_ps for t in (p, *_k.weight_copies(p))]

        def run_plain():  # the step, then the next forward's quantisation of each weight
            plain.step()
            return [t for p in plain_ps for t in (p, *_k.quant_weight(p))]

        def run_eager():  # torch's step, then torch's quantisation of each weight
            eager.step()
            return [t for p in eager_ps for t in (p, *Q.weight(p.detach()))]

        # p and g read, m and v read and written; p and its copies (outputs) written
        moved = (tuple(base) + tuple(grads)
                 + tuple(torch.empty(4 * p.numel(), dtype=torch.bfloat16, device="meta")
                         for p in base))
        return Setup({"lingen": run_fused, "eager": run_eager,
                      "adamw + fp8_quant_weight": run_plain}, moved,
                     lambda r: _dequant_weights(torch, r))
    return make


def cases(quick):
    # each row's family is its first word (adamw, adamw_fp8)
    return [dataclasses.replace(c, family=c.kernel.split()[0]) for c in _cases(quick)]


def _cases(quick):
    if quick:
        return [Case("adamw fp32", "7 tensors, 4 M params", _case(4_000_000), rtol=1e-2),
                Case("adamw_fp8 bf16", "2 weights, 6 M params", _case_fp8(6_000_000), rtol=2e-2)]
    return [Case("adamw fp32", "512 tensors, 590 M params", _case(590_000_000), rtol=1e-2),
            Case("adamw bf16 moments", "512 tensors, 590 M params",
                 _case(590_000_000, "bf16"), rtol=1e-2),
            Case("adamw bf16 params", "512 tensors, 590 M params, bf16 p, g, m, v",
                 _case(590_000_000, "bf16", bf16=True), rtol=2e-2),
            Case("adamw_fp8 bf16", "FP8 weights, 590 M params, bf16 p, g, m, v",
                 _case_fp8(590_000_000), rtol=2e-2)]
