"""cut.py GEN.cu > kernel.inc: a generated file for the emulator: the
helpers from templates/ that use inline PTX or that emu.h (or the driver)
defines are cut out; the rest (pure C helpers: scales, shuffles' butterflies,
software e4m3) are kept, so the kernel runs on its own arithmetic; emu_io.h
(the global loads and stores, after lg_u32x4) goes in their place."""
import re
import sys

EMU = {"lg_f2u", "lg_u2f", "lg_bf16_lo", "lg_bf16_hi", "lg_pack_bf16x2", "lg_swz", "lg_cp16", "lg_cp4",
       "lg_cp_commit", "lg_ldsm4", "lg_ldsm4t", "lg_mma_bf16", "lg_split_bf16x2"}
src = open(sys.argv[1]).read()
head, rest = src.split("// ----- helpers for this spec", 1)
out = []
for chunk in re.split(r"\n(?=\n)", head):
    names = re.findall(r"\b(lg_\w+)\s*\(", chunk.split("{", 1)[0]) if "static" in chunk else []
    name = names[0] if names else None
    if "asm" in chunk or (name in EMU) or "#define lg_cp_wait" in chunk:
        continue
    out.append(chunk)
sys.stdout.write("\n".join(out) + "\n#include \"emu_io.h\"\n// ----- helpers for this spec" + rest)
