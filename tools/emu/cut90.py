"""cut90.py GEN.cu > kernel.inc: a generated sm_90a FP8 GEMM for emu90.h.
Every helper with inline PTX is cut, those from templates/ and the spec's
own; a spec helper that issues wgmma.mma_async becomes a call of
emu_wgmma_e4m3 with its N, fp8_hold a no-op; the kernel's dynamic shared
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
for chunk in chunks(head):
    if "asm" in chunk or "#define lg_cp_wait" in chunk:
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
    elif name == "fp8_hold":
        out.append("\ntemplate <class T> static inline void fp8_hold(T &) {}")
    else:
        sys.exit(f"cut90.py: no emulation of the spec helper {name}")
kernel = kernel.replace("extern __shared__ __align__(1024) u8 smem[];", "u8 *const smem = emu_self->smem;")
# static __shared__ arrays: one a CTA (emu_static), not one a thread
n = iter(range(1 << 30))
kernel = re.sub(r"__shared__ (\w+) (\w+)\[(\w+)\];",
                lambda m: f"{m[1]} (&{m[2]})[{m[3]}] = *emu_static<{m[1]}[{m[3]}]>(emu_self, {next(n)});", kernel)
if "__shared__" in kernel:
    sys.exit("cut90.py: a __shared__ declaration it cannot place")
sys.stdout.write("\n".join(out) + kernel)
