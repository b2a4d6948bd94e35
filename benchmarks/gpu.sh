#!/usr/bin/env bash
# The GPU measurements of docs/gpu.md, in one go on a machine with one CUDA GPU and a Python
# that has torch: the attribution benchmark at BERT-base shape (12 layers, 12 heads, hidden 768,
# 128 tokens) in fp32 and tf32, each with 1,000 examples attributed end to end as an attribute
# job does, and in bf16 with 48 examples at 16 rows per pass (on an H100 80GB, auto's 220 rows
# and 64 rows ran out of memory: docs/gpu.md); then the fine-tuning benchmark in fp32 and
# bf16. The JSON files go to OUT_DIR (default benchmarks/results).
#     bash benchmarks/gpu.sh [OUT_DIR]
set -uo pipefail
out=${1:-benchmarks/results}
mkdir -p "$out"
export PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
gpu=$(python3 -c 'import torch; print(torch.cuda.get_device_name(0).split()[1].lower())')
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c 'import torch, transformers, pandas, pyarrow; print("torch", torch.__version__,
"transformers", transformers.__version__, "pandas", pandas.__version__, "pyarrow",
pyarrow.__version__)'
status=0
for precision in fp32 tf32; do
    timeout 240 python3 benchmarks/attribution.py --device cuda --precision "$precision" \
        --examples 8 --shard-examples 1000 \
        --out "$out/attribution-$gpu-bert-base-$precision.json" || status=1
done
timeout 120 python3 benchmarks/attribution.py --device cuda --precision bf16 --examples 1 \
    --shard-examples 48 --batch-size 16 --out "$out/attribution-$gpu-bert-base-bf16.json" || status=1
for precision in fp32 bf16; do
    timeout 180 python3 benchmarks/finetune.py --device cuda --precision "$precision" \
        --out "$out/finetune-$gpu-bert-base-$precision.json" || status=1
done
exit $status
