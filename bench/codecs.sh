#!/usr/bin/env bash
# Client CPU per request of every codec against a zero-latency simulator on
# loopback (batchbench-sim in its own process), exact 32-token prompts with the
# Qwen tokenizer and 16 output tokens, streamed and not: what speaking each API
# costs the client. The chat codec is the baseline, and the tool batchbench
# replaces (batchbench==0.7.0, chat only) is the reference from the same run.
# Then images (2 x 448x448 PNG or JPEG per request) and embeddings (8 inputs a
# request).
#
#   bash bench/codecs.sh                 # release build
#   BENCH_SMOKE=1 bash bench/codecs.sh   # dev build, tiny sizes: proves the script runs
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
if [ -n "$smoke" ]; then users=8; per_user=25
else users=64; per_user=300; fi
ensure_tools
ensure_reference
build batchbench batchbench-sim
start_sim
trap 'stop_sim' EXIT
n=$((users * per_user))
url="http://127.0.0.1:$port"
exact=(--model "$tok" --input-tokens 32 --output-tokens 16)
bb() { cpu_of "$n" "$target/batchbench" --host "$url" --users "$users" --requests-per-user "$per_user" "$@"; }
bb "${exact[@]}" > /dev/null # warm the word-table cache

echo "client CPU per request, $n requests, $users users, exact 32-token prompts, 16 output tokens"
declare -A us
for codec in openai_chat openai_completions openai_responses anthropic_messages sglang_generate; do
  for mode in json stream; do
    extra=(); [ "$mode" = stream ] && extra=(--stream)
    read -r wall cpu rss _ _ _ < <(bb "${exact[@]}" --codec "$codec" "${extra[@]}")
    us[$codec.$mode]=$(per_request_us "$cpu" "$n")
    printf '  %-20s %-6s %8s us/request  (%ss wall, peak RSS %s MB)\n' "$codec" "$mode" "${us[$codec.$mode]}" "$wall" $((rss / 1024))
  done
done
read -r wall cpu rss _ _ _ < <(bb "${exact[@]}" --codec openai_responses --codec-config '{"stateful": true}' --stream)
printf '  %-20s %-6s %8s us/request  (stateful, %ss wall)\n' openai_responses stream "$(per_request_us "$cpu" "$n")" "$wall"
for format in png jpeg; do
  read -r wall cpu rss _ _ _ < <(bb "${exact[@]}" --images-per-request 2 --image-size 448x448 --image-format "$format" --stream)
  printf '  %-20s %-6s %8s us/request  (2 x 448x448 %s images each, %ss wall, peak RSS %s MB)\n' openai_chat stream "$(per_request_us "$cpu" "$n")" "$format" "$wall" $((rss / 1024))
done
read -r wall cpu rss _ _ _ < <(bb --model "$tok" --input-tokens 32 --codec openai_embeddings --batch-size 8)
printf '  %-20s %-6s %8s us/request  (8 inputs of 32 tokens each, %ss wall)\n' openai_embeddings json "$(per_request_us "$cpu" "$n")" "$wall"
read -r wall cpu rss _ _ _ < <(ref_cpu_of "$n" "$ref_dir/batchbench" --host "$url" --users "$users" --requests-per-user "$per_user" "${exact[@]}")
ref=$(per_request_us "$cpu" "$n")
echo "  reference (batchbench==0.7.0, chat only, JSON): $ref us/request"
echo "each codec against the chat codec (JSON):"
for codec in openai_completions openai_responses anthropic_messages sglang_generate; do
  python3 -c "print(f'  $codec: {${us[$codec.json]}/${us[openai_chat.json]}:.2f}x, streamed {${us[$codec.stream]}/${us[openai_chat.stream]}:.2f}x the chat codec streamed; {${us[$codec.json]}/$ref:.3f}x the reference')"
done
