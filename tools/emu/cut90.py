"""cut90.py GEN.cu > kernel.inc: a generated sm_90a GEMM (the FP8 GEMMs,
the router GEMM) for emu90.h.
Every helper with inline PTX is cut, those from templates/ and the spec's
own; a spec helper that issues wgmma.mma_async becomes a call of
emu_wgmma_e4m3 or emu_wgmma_bf16 with its N (and transposes), fp8_hold a no-op; the kernel's dynamic shared
memory is its CTA's (emu90.h)."""
import re
import sys


def chunks(text):
    return re.split(r"\n(?=\n)", text)


def helper_name(chunk):
    code = "\n".join(line for line in chunk.splitlines() if not line.lstrip().startswith("//"))
    names = re.findall(r"\b(\w+)\s*\(", code.split("{", 1)[0])
    return names[0] if names else None


src = open(sys.argv[1]).read()
head, rest = src.split("// ----- helpers for this spec", 1)
m = re.search(r"\n// ----- lg_\w+", rest)
spec, kernel = rest[:m.start()], rest[m.start():]
out = []
# what emu_cuda.h / emu90.h define (by C where the helper uses intrinsics)
EMU = {"lg_f2u", "lg_u2f", "lg_bf16_lo", "lg_bf16_hi", "lg_pack_bf16x2"}
for chunk in chunks(head):
    name = helper_name(chunk) if "static" in chunk else None
    if name == "lg_split_tf32":  # cvt.rna.tf32.f32 in C: to nearest, ties away, 13 low bits cleared
        out.append("\nstatic inline float emu_tf32(float f) { return lg_u2f((lg_f2u(f) + 0x1000u) & ~0x1fffu); }\n"
                   "static inline void lg_split_tf32(u32 *t, int n, float lo, float hi) "
                   "{ lg_split_bf16x2(t, n, emu_tf32(lo), emu_tf32(hi)); }")
        continue
    if "asm" in chunk or "#define lg_cp_wait" in chunk or name in EMU:
        continue
    out.append(chunk)
# the spec's helpers: comment lines, then a definition up to its closing brace at column 0
for h in re.split(r"\n(?=(?://[^\n]*\n)*static )", "\n// ----- helpers for this spec" + spec):
    if "asm" not in h:
        out.append(h)
        continue
    name = helper_name(h)
    w = re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k32\.f32\.e4m3\.e4m3", h)
    if w:
        out.append(f"\nstatic inline void {name}(float *acc, u64 da, u64 db, int add) "
                   f"{{ emu_wgmma_e4m3(acc, {w.group(1)}, da, db, add); }}")
    elif re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k16\.f32\.bf16\.bf16", h):
        nb = re.search(r"m64n(\d+)k16", h).group(1)
        ta, tb = re.search(r"p, 1, 1, (\d), (\d);", h).groups()
        sig = re.search(name + r"\(([^)]*)\)", h).group(1)
        params = [x.strip().split()[-1].split("[")[0] for x in sig.split(",")]
        add = params[3] if len(params) > 3 else "1"
        decl = ", ".join(["float *" + params[0]] + [f"u64 {x}" for x in params[1:3]] + [f"int {x}" for x in params[3:]])
        out.append(f"\nstatic inline void {name}({decl}) "
                   f"{{ emu_wgmma_bf16({params[0]}, {nb}, {params[1]}, {params[2]}, {add}, {ta}, {tb}); }}")
    elif name == "fp8_hold":
        out.append("\ntemplate <class T> static inline void fp8_hold(T &) {}")
    else:
        sys.exit(f"cut90.py: no emulation of the spec helper {name}")
kernel = re.sub(r"extern __shared__ __align__\((\d+)\) u8 smem\[\];", "u8 *const smem = emu_self->smem;", kernel)
# static __shared__ arrays: one a CTA (emu_static), not one a thread
n = iter(range(1 << 30))
kernel = re.sub(r"__shared__ (\w+) (\w+)\[(\w+)\];",
                lambda m: f"{m[1]} (&{m[2]})[{m[3]}] = *emu_static<{m[1]}[{m[3]}]>(emu_self, {next(n)});", kernel)
# the kernel's own inline PTX: register fences (asm volatile("" : "+f"(v) ::
# "memory")) and programmatic dependent launch (the entries run one after
# another here) are nothing; bar.sync a named barrier
kernel = re.sub(r'asm volatile\(""\s*:\s*"\+f"\([^;]*\)\s*::\s*"memory"\);', ";", kernel)
kernel = re.sub(r'asm volatile\("griddepcontrol\.(?:wait|launch_dependents);"\s*:::\s*"memory"\);', ";", kernel)
kernel = re.sub(r'asm volatile\("bar\.sync %0, (\d+);"\s*::\s*"r"\(([^;]*)\)\s*:\s*"memory"\);',
                lambda m: f"lg_bar_id({m[2]}, {m[1]});", kernel)
if "asm" in kernel:
    sys.exit("cut90.py: inline PTX in the kernel's body it cannot emulate")
if "__shared__" in kernel:
    sys.exit("cut90.py: a __shared__ declaration it cannot place")
sys.stdout.write("\n".join(out) + kernel)
