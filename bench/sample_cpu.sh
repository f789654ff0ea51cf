# Sample a training process every 10 s: wall time, its CPU seconds (utime + stime), the last logged step and tokens.
# usage: bash bench/sample_cpu.sh PID RUN_DIR OUT_FILE   (for bench/train_precision.py curves --cpu-fp32/--cpu-bf16)
PID=$1; RUN=$2; OUT=$3; HZ=$(getconf CLK_TCK)
while kill -0 $PID 2>/dev/null; do
  CPU=$(awk -v hz=$HZ '{print ($14+$15)/hz}' /proc/$PID/stat 2>/dev/null)
  LAST=$(grep '"train_ppl_fwd"' $RUN/metrics.jsonl 2>/dev/null | tail -1 | python3 -c 'import sys,json; r=json.loads(sys.stdin.read() or "{}"); print(r.get("step",0), r.get("tokens",0))' 2>/dev/null)
  echo "$(date +%s.%N) $CPU $LAST" >> $OUT
  sleep 10
done
