#!/usr/bin/env bash
export BENCHES="bench/router-bwd-persistent.json@8192 configs/kernels/moe.json@8192 bench/k4b2/variants.json@8192 bench/h200-2026-12-01c/attn4.json@4096 bench/grg-variants.json@4096 bench/k1-fused.json@8192 bench/k1-fused.json@128,1024,16384"
exec bash .carry/go4.sh
