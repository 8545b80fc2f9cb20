# Issue 3, item 4 (GPU machine): the demo with a CUDA job. Skips here when
# there is no GPU; bench/transparent/gpu.sh runs it with 8 GiB and the bare
# driver and CRIU timings.
source "$(dirname "$0")/lib.sh"
# It skips only where there is no GPU; a GPU whose driver or tools fail,
# or a GPU machine without the CUDA workload, fails.
if ! compgen -G "/dev/nvidia[0-9]*" >/dev/null; then
	echo "SKIP: no GPU here (no /dev/nvidia<N> device node)"
	exit 77
fi
command -v nvidia-smi >/dev/null || fail "a GPU device node is here but no nvidia-smi"
gpus=$(nvidia-smi -L) || fail "a GPU device node is here but nvidia-smi -L fails"
if ! grep -q "^GPU " <<<"$gpus"; then
	echo "SKIP: no GPU here (nvidia-smi -L lists none)"
	exit 77
fi
GPUW=$(dirname "$CREST")/crest-workload-gpu
[ -x "$GPUW" ] || fail "a GPU is here but the CUDA workload was not built (no nvcc? scripts/setup.sh installs it)"
need_root
cd "$T"
"$CREST" --store "$S" demo --gpu --json --mib "${GPU_MIB:-1024}" --checkpoints 3 --restore-from 2 >demo.json
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["identical"]; print("restored", d["restore"])' demo.json
echo PASS
