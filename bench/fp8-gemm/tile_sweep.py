"""bench/fp8-gemm/tile_sweep.py SET... (run from the repository root on the GPU machine,
LINGEN_LIBRARY set): each GEMM's variants against its default tile, TFLOP/s and max |diff| to the
default's output (0: bit for bit), with torch._scaled_mm (blockwise) after them.
SET: ahead (session 8: the groups of tile.ahead, the wgrad ahead), overlap (session 9:
tile.overlap, the epilogue under the next tile's first wgmmas; odd token counts checked too),
defaults (session 9's default against the one before; qkv: its first two rows) or wide (session 11: wider N tiles at
K 2048, fewer shared-memory bytes a multiply-add than 128 x 128) longk (session 12: the TMA
epilogue at reductions of 4096 and more) e2 (session 12's default against the one before), k2048 (session 12: other tiles at K 2048)
e3 (tile.epilogue 3, a half-width epilogue buffer, against the default)
wgrad (session 13: the wgrad's tiles at the LM head and 9984x3584x5120)
wahead (session 13: the wgrad's ahead groups at five shapes, twice)
ffma (session 15: tile.ffma, the promotion's FFMAs let the warp yield in the cubin, twice)
or defaults15 (session 15: the defaults at the wgrad's shapes and two forwards, each twice; run it
with one library and another, LINGEN_LIBRARY, to time a change of the emitter)
pingpong (session 16: tile.pingpong, each consumer warpgroup a tile of its own, against the
default, twice, at the dense shapes of the step and the big forward; the wgrad with waves too)
or bisect (session 17: the defaults once at four shapes; run it with one library and another)."""
import sys, torch
sys.path.insert(0, "tools")
import fp8_gemm_bench as fb

OV = {"overlap": 1}
PP = {"pingpong": 1}
OLD = {"ahead": 1, "overlap": 0}  # the default before session 9
SETS = {
    "ahead": [
        ("forward", 8192, 3072, 2048, [None, {"ahead": 8}, {"ahead": 16}, {"ahead": 0}]),
        ("dgrad", 8192, 3072, 2048, [None, {"ahead": 8}, {"ahead": 24}, {"ahead": 0}]),
        ("forward", 8192, 157184, 2048, [None, {"ahead": 8}, {"ahead": 16}]),
        ("forward", 4096, 7168, 16384, [None, {"m": 128, "cluster": 2}, {"m": 128, "cluster": 2, "ahead": 16},
                                        {"m": 128, "cluster": 2, "ahead": 32}]),
        ("wgrad", 8192, 157184, 2048, [None, {"ahead": 1}, {"ahead": 8}, {"n": 96, "ahead": 8},
                                       {"n": 64, "ahead": 8}]),
        ("wgrad", 9984, 3584, 5120, [None, {"ahead": 8}, {"n": 96, "ahead": 8}]),
    ],
    "overlap": [
        ("forward", 8192, 3072, 2048, [None, OV, {**OV, "ahead": 8}, {**OV, "ahead": 16}, {**OV, "epilogue": 0}, {**OV, "ahead": 0},
                                       {"m": 256, "cluster": 2, "epilogue": 1}]),
        ("dgrad", 8192, 3072, 2048, [None, OV, {**OV, "ahead": 24}, {**OV, "epilogue": 0}]),
        ("forward", 8192, 157184, 2048, [None, OV, {**OV, "ahead": 16}]),
        ("forward", 8192, 2048, 2048, [None, OV]),
        ("forward", 8192, 1024, 2048, [None, OV]),
        ("forward", 8192, 2048, 512, [None, OV]),
        ("forward", 9973, 3584, 5120, [None, OV]),
        ("forward", 127, 3072, 2048, [None, OV]),
        ("dgrad", 1, 3072, 2048, [None, OV]),
        ("wgrad", 8192, 157184, 2048, [None, OV, {"ahead": 8, "overlap": 1}]),
        ("wgrad", 9973, 3584, 5120, [None, OV, {"ahead": 8, "overlap": 1}]),
    ],
    "defaults": [  # session 9's default (overlap, the first ahead group out of the loop) against the one
        # before, against the whole reduction one ahead group with overlap, and with two epilogue
        # buffers (session 11: one named barrier a tile)
        (form, M, N, K, [None, OLD, {"ahead": min(32, -(-(K if form == "forward" else N) // 128)), "overlap": 1},
                         {"epilogue": 2}])
        for form, M, N, K in (("forward", 8192, 3072, 2048), ("dgrad", 8192, 3072, 2048), ("forward", 8192, 2048, 2048),
                              ("forward", 8192, 1024, 2048), ("forward", 8192, 2048, 512), ("dgrad", 8192, 2048, 512),
                              ("forward", 8192, 157184, 2048), ("dgrad", 8192, 2048, 2048), ("forward", 9973, 3072, 2048),
                              ("forward", 4096, 4096, 4096))
    ],
    "wide": [
        (form, M, N, K, [None, {"n": 192}, {"n": 192, "epilogue": 1}, {"n": 256, "cluster": 1}, {"m": 256, "cluster": 2, "epilogue": 1}])
        for form, M, N, K in (("forward", 8192, 3072, 2048), ("dgrad", 8192, 3072, 2048), ("forward", 8192, 157184, 2048))
    ],
    "longk": [  # session 12: the TMA epilogue at long reductions, where the default stores from registers
        (form, M, N, K, [None, {"epilogue": 1}, {"epilogue": 2}, {"epilogue": 1, "stages": 4}] + extra)
        for form, M, N, K, extra in (
            ("forward", 4096, 4096, 4096, []),
            ("forward", 4096, 7168, 16384, [{"m": 128, "cluster": 2, "epilogue": 1}, {"m": 128, "cluster": 2, "epilogue": 2}]),
            ("forward", 9984, 3584, 5120, []),
            ("dgrad", 9984, 5120, 3584, []),
            ("forward", 8192, 2048, 4096, []),
            ("forward", 8192, 157184, 2048, [{"m": 256, "cluster": 2, "epilogue": 1},
                                             {"m": 256, "cluster": 2, "epilogue": 2}]))
    ],
    "e2": [  # session 12's default (two epilogue buffers from a reduction of 3072, 128 rows at any
        # reduction) against the one before it
        ("forward", 8192, 3072, 2048, [None]),
        ("dgrad", 8192, 3072, 2048, [None, {"epilogue": 1}]),
        ("forward", 4096, 4096, 4096, [None, {"epilogue": 0}]),
        ("forward", 4096, 7168, 16384, [None, {"m": 256, "cluster": 2, "epilogue": 0}]),
        ("forward", 9984, 3584, 5120, [None, {"epilogue": 0}]),
        ("forward", 9973, 3584, 5120, [None]),
        ("dgrad", 9984, 5120, 3584, [None, {"epilogue": 0}]),
        ("dgrad", 8192, 157184, 2048, [None, {"epilogue": 0}]),
    ],
    "k2048": [  # session 12: what the K 2048 forward's default might trade (ncu: tensor pipe 61%)
        ("forward", 8192, 3072, 2048, [None, {"cluster": 1}, {"stages": 4}, {"ahead": 0}, {"n": 192, "ahead": 0},
                                       {"n": 256, "ahead": 0, "cluster": 1}]),
    ],
    "e3": [  # session 12's tile.epilogue 3 (one half-width buffer: 6 stages at 128 x 128 bf16), not yet timed
        (form, M, N, K, [None, {"epilogue": 3}, {"epilogue": 3, "stages": 5}])
        for form, M, N, K in (("forward", 8192, 3072, 2048), ("dgrad", 8192, 3072, 2048), ("forward", 8192, 2048, 2048),
                              ("forward", 8192, 1024, 2048), ("forward", 8192, 2048, 512), ("forward", 8192, 157184, 2048),
                              ("forward", 4096, 4096, 4096), ("wgrad", 8192, 3072, 2048))
    ],
    "wgrad": [  # session 13: the wgrad (0.75-0.81x _scaled_mm, below bf16) against what it might take
        ("wgrad", 8192, 157184, 2048, [None, {"ahead": 8}, {"ahead": 16}, {"epilogue": 2}, {"epilogue": 3},
                                       {"epilogue": 3, "ahead": 8}, {"cluster": 2}, {"n": 96, "ahead": 8},
                                       {"n": 64, "ahead": 8}]),
        ("wgrad", 9984, 3584, 5120, [None, {"ahead": 8}, {"epilogue": 3}, {"epilogue": 3, "ahead": 8}, {"cluster": 2}]),
    ],
    "wahead": [  # session 13: the wgrad's ahead groups (one call: ahead 16 at the LM head +3%, ahead 8 at
        # 9984x3584x5120 +12%, both within a call's spread elsewhere), twice each
        (form, M, N, K, [None, {"ahead": 8}, {"ahead": 16}, {"ahead": 32}, None, {"ahead": 8}, {"ahead": 16},
                         {"ahead": 32}])
        for form, M, N, K in (("wgrad", 8192, 157184, 2048), ("wgrad", 8192, 3072, 2048), ("wgrad", 8192, 2048, 2048),
                              ("wgrad", 9984, 3584, 5120), ("wgrad", 8192, 2048, 1024))
    ],
    "ffma": [  # session 15: tile.ffma's three rewrites of the cubin (runtime/sass.h) against NVRTC's, twice
        (form, M, N, K, [None, {"ffma": 1}, {"ffma": 2}, {"ffma": 3}, None, {"ffma": 2}, {"ffma": 3}])
        for form, M, N, K in (("forward", 8192, 3072, 2048), ("dgrad", 8192, 3072, 2048), ("forward", 8192, 2048, 512),
                              ("forward", 4096, 7168, 16384), ("forward", 8192, 157184, 2048),
                              ("wgrad", 8192, 157184, 2048), ("wgrad", 9984, 3584, 5120))
    ],
    "defaults15": [
        (form, M, N, K, [None, None])
        for form, M, N, K in (("wgrad", 8192, 157184, 2048), ("wgrad", 9984, 3584, 5120), ("wgrad", 8192, 3072, 2048),
                              ("forward", 8192, 3072, 2048), ("forward", 4096, 7168, 16384))
    ],
    "bisect": [  # session 17: the defaults once at four shapes, to time libraries against each other
        (form, M, N, K, [None])
        for form, M, N, K in (("forward", 8192, 3072, 2048), ("forward", 4096, 7168, 16384), ("dgrad", 9984, 5120, 3584),
                              ("wgrad", 8192, 157184, 2048))
    ],
    "pingpong": [  # session 16: tile.pingpong (one warpgroup's promotion and epilogue under the other's
        # wgmmas) with each epilogue and stage count it fits, against the default, twice
        (form, M, N, K, [None, PP, {**PP, "epilogue": 2}, {**PP, "cluster": 1}, {**PP, "stages": 4}, None, PP])
        for form, M, N, K in (("forward", 8192, 3072, 2048), ("dgrad", 8192, 3072, 2048), ("forward", 8192, 2048, 512),
                              ("forward", 4096, 7168, 16384), ("forward", 8192, 157184, 2048),
                              ("dgrad", 9984, 5120, 3584))
    ] + [  # and the wgrad with waves (its column scales read in the promotion), against ahead 8
        (form, M, N, K, [None, PP, {**PP, "epilogue": 2}, {"m": 256, "epilogue": 1},
                         {"m": 256, "epilogue": 1, "cluster": 2}, None, PP])
        for form, M, N, K in (("wgrad", 8192, 157184, 2048), ("wgrad", 9984, 3584, 5120), ("wgrad", 8192, 3072, 2048))
    ],
}
SETS["qkv"] = SETS["defaults"][:2]  # the defaults set's forward and dgrad at 8192x3072x2048 alone
ROWS = [row for name in (sys.argv[1:] or ["overlap"]) for row in SETS[name]]  # one SET or several
print("| form | MxNxK | tile | TFLOP/s | vs default | max|diff| to default |")
print("|---|---|---|---|---|---|")
for form, M, N, K, tiles in ROWS:
    ours, peer, mm, ref, rows = fb.case(form, M, N, K)
    fl = 2.0 * M * N * K
    base = None
    t0 = None
    for t in tiles:
        fb.TILE = t
        try:
            y = ours()
            torch.cuda.synchronize()
            tm = fb.timed(ours, 10)
            d = 0.0 if base is None else (y.float() - base).abs().max().item()
            if base is None:
                base, t0 = y.float(), tm
            print(f"| {form} | {M}x{N}x{K} | {t or 'default'} | {fl / tm / 1e9:.0f} | {t0 / tm:.3f} | {d:.3g} |", flush=True)
        except Exception as e:
            print(f"| {form} | {M}x{N}x{K} | {t} | x: {str(e)[:120]} | | |", flush=True)
    fb.TILE = None
    try:
        tp = fb.timed(peer, 10)
        print(f"| {form} | {M}x{N}x{K} | _scaled_mm | {fl / tp / 1e9:.0f} | {t0 / tp:.3f} | |", flush=True)
    except Exception as e:
        print(f"| {form} | {M}x{N}x{K} | _scaled_mm | x: {str(e)[:100]} | | |", flush=True)
    del base
    torch.cuda.empty_cache()
