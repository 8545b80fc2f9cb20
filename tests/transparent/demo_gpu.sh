# Issue 3, item 4 (GPU machine): the demo with a CUDA job. Skips here when
# there is no GPU; bench/transparent/gpu.sh runs it with 8 GiB and the bare
# driver and CRIU timings.
source "$(dirname "$0")/lib.sh"
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
	echo "SKIP: no NVIDIA GPU on this machine"
	exit 77
fi
GPUW=$(dirname "$CREST")/crest-workload-gpu
[ -x "$GPUW" ] || { echo "SKIP: the CUDA workload was not built (no nvcc)"; exit 77; }
need_root
cd "$T"
"$CREST" --store "$S" demo --gpu --json --mib "${GPU_MIB:-1024}" --checkpoints 3 --restore-from 2 >demo.json
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["identical"]; print("restored", d["restore"])' demo.json
echo PASS
