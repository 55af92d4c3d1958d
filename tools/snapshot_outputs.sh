#!/usr/bin/env bash
# Writes the outputs of check, explain, suggest, layouts and report on the built-in
# experiments into DIR (one file per command), so that a refactor can be shown to leave
# them byte-identical: run it before and after, then `diff -r BEFORE AFTER`.
# Usage: tools/snapshot_outputs.sh DIR   (needs areal-alloc on PATH)
set -u
out=${1:?usage: tools/snapshot_outputs.sh DIR}
mkdir -p "$out"
export AREAL_ALLOC_GPU=H100-80GB
unset AREAL_ALLOC_ON_MEMORY AREAL_ALLOC_REFERENCE_VERSION
cd "$(dirname "$0")/.."
run() { name=$1; shift; { "$@"; echo "exit $?"; } >"$out/$name.txt" 2>&1; }
for e in conf/app/experiment/*.yaml; do
  x=$(basename "$e" .yaml)
  run "main-$x" areal-alloc experiment="$x"
  run "check-$x" areal-alloc check "$e" --host-memory-gib 2048 --host-cpus 128
  run "check-json-$x" areal-alloc check --json "$e" --host-memory-gib 2048 --host-cpus 128
  run "suggest-config-$x" areal-alloc suggest --config "$e"
  run "report-$x" areal-alloc report --config "$e" -o "$out/report-$x.html" --host-memory-gib 2048 --host-cpus 128
done
run main-default areal-alloc
run explain-fsdp areal-alloc explain fsdp:d4t2 --model Qwen2.5-7B --gpu H100-80GB
run explain-fsdp-json areal-alloc explain fsdp:d4t2 --model Qwen2.5-7B --gpu H100-80GB --json
run explain-megatron areal-alloc explain megatron:d2p2t4e4 --model Qwen3-30B-A3B --gpu H100-80GB
run explain-hybrid areal-alloc explain 'megatron:(attn:d4p2t2c2|ffn:d2p2t4e2)' --model Qwen3-30B-A3B --gpu H100-80GB
run explain-archon areal-alloc explain archon:d8 --model Qwen3-8B --gpu H200
run explain-sglang areal-alloc explain sglang:d2t4 --model Qwen3-8B --gpu H100-80GB
run explain-vllm areal-alloc explain vllm:d2t4 --model Qwen3-8B --gpu H100-80GB
run explain-ref areal-alloc explain fsdp:d1 --model Qwen3-8B --gpu H200 --tokens 32768 --tokens-per-step 32768 --seq-len 32768 --optimizer none
run explain-h200 areal-alloc explain fsdp:d1 --model Qwen3-1.7B --gpu H200 --tokens 4096 --recompute none --tokens-per-step 4096 --seq-len 4096
run layouts-rank-megatron areal-alloc layouts megatron 64 --model Qwen3-30B-A3B --gpu H100-80GB --rank
run layouts-rank-fsdp areal-alloc layouts fsdp 16 --model Qwen2.5-1.5B --gpu H100-80GB --rank
run layouts-fit-archon areal-alloc layouts archon 32 --model Qwen3-8B --gpu H100-80GB
run suggest-1.5B areal-alloc suggest --model Qwen2.5-1.5B --gpus 16 --gpu H100-80GB
run suggest-8B areal-alloc suggest --model Qwen3-8B --gpus 64 --gpu H100-80GB
run suggest-30B-32 areal-alloc suggest --model Qwen3-30B-A3B --gpus 32 --gpu H100-80GB
run suggest-30B-64-json areal-alloc suggest --model Qwen3-30B-A3B --gpus 64 --gpu H100-80GB --json
run suggest-30B-fsdp-vllm areal-alloc suggest --model Qwen3-30B-A3B --gpus 64 --gpu H100-80GB --train-backend fsdp --rollout-backend vllm
run suggest-235B areal-alloc suggest --model Qwen3-235B-A22B --gpus 512 --gpu H100-80GB
run suggest-sweep areal-alloc suggest --model Qwen3-8B --gpus 32 --gpu H100-80GB --sweep
run suggest-archon areal-alloc suggest --model Qwen3-8B --gpus 32 --gpu H200 --train-backend archon
run migrate areal-alloc migrate 'sglang:d4+fsdp:d4'
# the report embeds no time stamp (checked: the page is the plan); drop the output path line
sed -i "s#$out#OUT#g" "$out"/*.txt
echo "wrote $(ls "$out" | wc -l) files to $out"
run suggest-config-flags areal-alloc suggest --config conf/app/experiment/grpo_2x8.yaml --tokens 8192 --recompute full --context-length 16384
run suggest-config-gpus areal-alloc suggest --config conf/app/experiment/ppo_critic.yaml --gpus 32 --gpus-per-node 4 --json
run suggest-config-cap areal-alloc suggest --config conf/app/experiment/grpo_2x8.yaml --gen-len 100000
run suggest-config-noroom areal-alloc suggest --config conf/app/experiment/grpo_2x8.yaml --prompt-len 10000000
run suggest-sync-critic areal-alloc suggest --model Qwen3-8B --gpus 32 --gpu H100-80GB --sync --no-ref --critic --mean-gen-len 2000
run suggest-no-model areal-alloc suggest --gpus 32 --gpu H100-80GB
run suggest-overrides-alone areal-alloc suggest --model Qwen3-8B --gpus 32 x=1
run suggest-prompt-cap areal-alloc suggest --model Qwen3-8B --gpus 32 --gpu H100-80GB --prompt-len 40000
run suggest-nofit areal-alloc suggest --model Qwen3-235B-A22B --gpus 8 --gpu H100-80GB --recompute full
run explain-generation areal-alloc explain sglang:d2t4 --model Qwen3-8B --gpu H100-80GB --batch 64 --mean-gen-len 3000
run explain-generation-json areal-alloc explain vllm:d1t8 --model Qwen3-8B --gpu H100-80GB --batch 512 --prompt-len 4000 --gen-len 30000 --json
run explain-training-speed areal-alloc explain fsdp:d8 --model Qwen3-8B --gpu H100-80GB --tokens-per-step 65536
run suggest-config-cluster-gpu env -u AREAL_ALLOC_GPU AREAL_ALLOC_DETECT=0 AREAL_ALLOC_REFERENCE_VERSION=off areal-alloc suggest --config conf/app/experiment/grpo_2x8.yaml +cluster.gpu=H200 --top 1
