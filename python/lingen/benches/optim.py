"""The fused optimiser (issue 35): one AdamW step of a model's parameters.
lingen's row is lingen.optim.AdamW (one launch of the generated adamw
kernel per group and device); eager is torch.optim.AdamW with foreach=True
(torch's default on CUDA), and "torch fused" its fused=True CUDA kernel.
Each implementation steps its own copy of the same parameters and
gradients, so the first steps agree (the check compares a later step with
eager's first, hence its 1e-2: a step moves a parameter by about lr = 1e-3).
Bytes moved: 28 a parameter (p, g, m, v read; p, m, v written), 20 with bf16
moments."""
from . import Case, Setup

SHAPES = [(2048, 2048), (512, 2048), (2048,), (1024, 2048), (2048, 256), (128,), (1,)]


def _params(env, total, shapes):
    torch = env.torch
    ps, n = [], 0
    while n < total:
        p = env.randn(*shapes[len(ps) % len(shapes)], dtype=torch.float32)
        ps.append(p)
        n += p.numel()
    return ps


def _case(total, moments="fp32", shapes=SHAPES):
    def make(env):
        torch = env.torch
        import lingen.optim
        base = _params(env, total, shapes)
        grads = [env.randn(*p.shape, dtype=torch.float32) * 1e-3 for p in base]

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
        impls = {"lingen": stepper(lingen.optim.AdamW(ours, lr=1e-3, moments=moments), ours),
                 "eager": stepper(torch.optim.AdamW(eager, lr=1e-3, foreach=True), eager)}
        if moments == "fp32":
            impls["torch fused"] = stepper(torch.optim.AdamW(fused, lr=1e-3, fused=True), fused)
        # p and g read, m and v read and written (the result, p, is counted as written)
        mdt = torch.bfloat16 if moments == "bf16" else torch.float32
        moments_rw = tuple(torch.empty(4 * p.numel(), dtype=mdt, device="meta") for p in base)
        moved = tuple(base) + tuple(grads) + moments_rw
        return Setup(impls, moved, lambda ps: tuple(p.detach() for p in ps))
    return make


def cases(quick):
    if quick:
        return [Case("adamw fp32", "7 tensors, 4 M params", _case(4_000_000), rtol=1e-2)]
    return [Case("adamw fp32", "512 tensors, 590 M params", _case(590_000_000), rtol=1e-2),
            Case("adamw bf16 moments", "512 tensors, 590 M params",
                 _case(590_000_000, "bf16"), rtol=1e-2)]
