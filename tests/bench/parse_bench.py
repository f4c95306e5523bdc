"""Parse speed and peak memory of commscope's Kineto reader, against bare ijson and json.load.

What it measures: for Kineto traces of about 50 MB, 500 MB and 2 GB, each parse method runs
alone in a fresh child process (`--child`, this same script) that reports the CPU time
(`time.process_time`, robust on a shared machine) and the wall time of the parse, and its
peak RSS. Each (size, method) runs `--repeat` times; the
table shows the best CPU and wall times and the largest peak RSS, and each method's
CPU-time speed relative to bare ijson's in the same run. Methods:

  commscope  `TraceReader(f, path).batches()`, every batch consumed (the default reader: the
             fast path of `collector/fastparse.py` on this Kineto layout; checked it was taken);
  commscope-ijson  the same with `fast=False`: the ijson path every other layout takes;
  ijson      `ijson.items(f, "traceEvents.item", use_float=True)`, every item;
  json.load  the stdlib loading the whole document, under an address-space limit
             (`--as-limit-gb`, also applied to the other children): "exceeded N GB" when hit;
  paired     commscope (as above) and bare ijson (as above) in ONE child, in turns of 25 MB of
             input each, CPU time summed per parser: its "vs ijson" is ijson's CPU over
             commscope's (median over rounds). The load on a shared machine changes from one
             child to the next (separate children's ratios swing 1.5-2.9x under load 8-12);
             in turns both parsers see the same load, so this is the ratio to quote there;
  report     the whole `commscope report FILE --jobs 1` in this child (parse, normalise,
             reduce, the report written; checked to have read by the fast path): its "vs
             ijson" is bare ijson's CPU over the report's per round, the median of the rounds.
  report-rawargs  bench only, never the product: `report` with the fast path's decode
             patched to read `args` as msgspec.Raw (its brackets and tokens checked, neither
             its strings' UTF-8 nor its numbers' range: no proof that yajl reads it alike)
             for the categories the normaliser ignores (IGNORED_CATEGORIES; a union tagged
             by `cat` chooses in msgspec): what a ruling "an event the reduction ignores need
             only be well-formed JSON" would give.

`--callgrind` counts instructions instead (valgrind, ~50x slower, so small sizes): per method,
the instructions per MB beyond a run on a 1 MB input (start-up left out). Load does not change
them: they show whether a parse costs more per MB as the file grows. For whole copies of the
real trace: `--callgrind --sizes 54,110 --methods commscope,ijson`. With `--methods ijson,report`
and `--input real` or `dense`, the whole report's instructions a MB beside bare ijson's: the
load-free figure of what a change saves (run it again with `PYTHONPATH` naming a base tree that
holds `commscope/`, as `dense_bench.py --against` takes, for the figure before). Below one
copy of the real trace (53.7 MB) a `real` input is that trace's head, which holds CPU ops,
annotations and memory events but no kernel, launch call or flow event (they start 40% into
its events): `--sizes 54` measures a whole copy, every kind of event in its share.

Inputs (`--input`): `real` (the default) scales the largest real trace of ../shared/traces
(kineto/single_rank/v100_allreduce_216k_events_rank1.json.gz, 53.7 MB, Kineto's own layout): its
header, then its events written again and again, each copy 2 s later (`ts`) with its own
kernel-launch correlation ids, cut at an event boundary to the size, then its trailer.
`synthetic` is the trace of a DDP training job on 8 H100s, generated here by streaming writes
with a fixed seed. `dense` scales, as `real` does, one rank of `tests/simjob.py`'s TorchTitan-
like job (the generator of `scale_bench.py`), its filler set for `--density` collectives a MB
(default 86). `--layout compact` writes a real or dense input again as compact JSON
(`json.dump` with separators `,` `:`, keys in their order), read by the fast path as well.

Before each child the parent reads the input once, so every method starts from the page cache
(json.load's child evicts it at 2 GB). `--methods` runs a subset (ijson, the baseline, always
wanted). Peak RSS is the child's VmHWM (/proc/self/status). `ru_maxrss` is printed by the
child too but not used: Linux carries the parent's high-water mark over fork/vfork+exec into
it, so it never reads below the parent's RSS (here the generator's).

The commscope child also reports what the reader emitted; the script fails (exit 1) unless
its event count, CommOp count (= NCCL kernels written), GpuOp and Step counts and the trace's
metadata match what the generator wrote (synthetic input), or, on a scaled real trace, unless
the fast path gives exactly what the ijson path gives (events, CommOps, GpuOps, Steps, CpuSpans,
dropped and unknown-size counts, metadata) and bare ijson counts the same items. 1 MB = 10^6
bytes everywhere. Inputs live in a temp dir that is deleted at the end (one input on disk at
a time) unless `--keep DIR` is given.

Run (from the repo root):
    .venv/bin/python tests/bench/parse_bench.py                  # 50 MB, 500 MB, 2 GB
    .venv/bin/python tests/bench/parse_bench.py --quick          # 50 MB only
    .venv/bin/python tests/bench/parse_bench.py --sizes 50,500 --repeat 3 --keep /tmp/traces
    .venv/bin/python tests/bench/parse_bench.py --input synthetic --quick
    .venv/bin/python tests/bench/parse_bench.py --methods commscope,ijson,paired --repeat 1
    .venv/bin/python tests/bench/parse_bench.py --input dense --layout compact --sizes 300 \
        --methods ijson,commscope,report --repeat 3
    .venv/bin/python tests/bench/parse_bench.py --callgrind --sizes 54,110 --methods commscope
It is a script, not a test: nothing here asserts on timings.
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import importlib
import itertools
import json
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Protocol, Union

import msgspec
from machineinfo import cpu_and_python, peak_rss_mb, ru_maxrss_mb

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: simjob

METHODS = ("commscope", "commscope-ijson", "ijson", "json.load", "paired", "report")  # default
DEFAULT_SIZES_MB = (50, 500, 2000)
MB = 1_000_000
SEED = 20_240_601

# ---------------------------------------------------------------- the trace generator

PID = 2_871_455  # the training process; its main thread has the same id
COMPUTE, COMM = 7, 20  # CUDA streams
T0_NS = 3_951_362_804_245_000  # first timestamp (the trace writes µs with 3 decimals)
BASE_TIME_NS = 1_717_171_717_000_000_000
WORLD = 8
LAYERS_PER_STEP = 8
CALIBRATION_STEPS = 4
GB_PER_S_BUS = 60  # NCCL bus bandwidth, bytes per ns
P_FREE = 0.9  # chance of a "[memory]" free event after an op's allocation
P_CAPTURE_CHECK = 0.8  # chance of a cudaStreamIsCapturing call before a launch
P_EVENT_RECORD = 0.2  # chance of a cudaEventRecord call after a launch

_HOST = f'"pid": {PID}, "tid": {PID}'
CPU_X = (
    '  {\n    "ph": "X", "cat": "%s", "name": "%s", ' + _HOST + ",\n"
    '    "ts": %.3f, "dur": %.3f,\n    "args": {\n      %s\n    }\n  },\n'
)
OP_ARGS = '"External id": %d,"Record function id": 0, "Ev Idx": %d%s'
PY_ARGS = '"Python parent id": %d, "Python id": %d, "Python thread": 0'
MEMORY = (
    '  {\n    "ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]",\n'
    "    " + _HOST + ',\n    "ts": %.3f,\n    "args": {\n      "Total Reserved": %d, '
    '"Total Allocated": %d, "Bytes": %d, "Addr": %d, "Device Id": 0, "Device Type": 1\n'
    "    }\n  },\n"
)
FLOW_S = (
    '  {\n    "ph": "s", "id": %d, ' + _HOST + ', "ts": %.3f,\n'
    '    "cat": "%s", "name": "%s"\n  },\n'
)
FLOW_F = (
    '  {\n    "ph": "f", "id": %d, "pid": %s, "tid": %d, "ts": %.3f,\n'
    '    "cat": "%s", "name": "%s", "bp": "e"\n  },\n'
)
RUNTIME = (
    '  {\n    "ph": "X", "cat": "cuda_runtime", "name": "%s", ' + _HOST + ",\n"
    '    "ts": %.3f, "dur": %.3f,\n    "args": {\n      "External id": %d,\n'
    '      "cbid": %d, "correlation": %d\n    }\n  },\n'
)
GPU = (
    '  {\n    "ph": "X", "cat": "%s", "name": "%s", "pid": 0, "tid": %d,\n'
    '    "ts": %.3f, "dur": %.3f,\n    "args": {\n      "External id": %d,\n'
    '      %s"device": 0, "context": 1,\n      "stream": %d, "correlation": %d,\n'
    "      %s\n    }\n  },\n"
)
QUEUED = '"queued": 0, '
MEMCPY_TAIL = '"bytes": %d, "memory bandwidth (GB/s)": %.6f'
NCCL_TAIL = (
    ',\n      "Collective name": "allreduce", "In msg nelems": %d, "Out msg nelems": %d, '
    '"Group size": 8, "dtype": "BFloat16", "In split size": "[]", "Out split size": "[]", '
    '"Process Group Name": "0", "Process Group Description": "default_pg", '
    '"Process Group Ranks": "[0, 1, 2, 3, 4, 5, 6, 7]"'
)
RECORD_COMMS_ARGS = (
    ', "Input Dims": [[%d]], "Input type": ["c10::BFloat16"], "Input Strides": [[1]], '
    '"Concrete Inputs": [""], "Collective name": "allreduce", "dtype": "BFloat16", '
    '"In msg nelems": %d, "Out msg nelems": %d, "In split size": "[]", "Out split size": "[]", '
    '"Global rank start": 0, "Global rank stride": 1, "Group size": 8, '
    '"Process Group Name": "0", "Process Group Description": "default_pg", '
    '"Process Group Ranks": "[0, 1, 2, 3, 4, 5, 6, 7]"'
)
C10D_SHAPES = (
    ', "Input Dims": [[[%d]], [], [], [], []], '
    '"Input type": ["GenericList", "Object", "Object", "Object", "Int"], '
    '"Input Strides": [[[1]], [], [], [], []], "Concrete Inputs": ["", "", "", "", "-1"]'
)
METADATA = (
    '  {\n    "name": "%s", "ph": "M", "ts": %.3f, "pid": %s, "tid": %d,\n'
    '    "args": {\n      "%s": %s\n    }\n  },\n'
)
RECORD_WINDOW_END = (
    '  {\n    "name": "Record Window End", "ph": "i", "s": "g",\n'
    '    "pid": "", "tid": "", "ts": %.3f\n  }\n'
)
FOOTER = (
    '],\n  "traceName": "/tmp/traces/rank0.%d.pt.trace.json",\n'
    '  "displayTimeUnit": "ms",\n  "baseTimeNanoseconds": %d\n}\n'
)


def _shapes(dims: list[Any], types: list[str], concrete: list[str] | None = None) -> str:
    """The shape args of a cpu_op, pre-serialised (strides are those of contiguous tensors)."""
    strides = [[_stride(d, i) for i in range(len(d))] for d in dims]
    return (
        f', "Input Dims": {json.dumps(dims)}, "Input type": {json.dumps(types)}, '
        f'"Input Strides": {json.dumps(strides)}, '
        f'"Concrete Inputs": {json.dumps(concrete or [""] * len(dims))}'
    )


def _stride(dims: list[int], axis: int) -> int:
    stride = 1
    for extent in dims[axis + 1 :]:
        stride *= extent
    return stride


_ACT, _W, _UP = [1, 4096, 4096], [4096, 4096], [11008, 4096]
_BF16 = "c10::BFloat16"
SHAPES: dict[str, str] = {
    "aten::linear": _shapes([_ACT, _W, []], [_BF16, _BF16, ""]),
    "aten::t": _shapes([_W], [_BF16]),
    "aten::matmul": _shapes([_ACT, [4096, 4096]], [_BF16, _BF16]),
    "aten::mm": _shapes([[4096, 4096], [4096, 11008]], [_BF16, _BF16]),
    "aten::layer_norm": _shapes(
        [_ACT, [], [4096], [4096], [], []],
        [_BF16, "ScalarList", _BF16, _BF16, "Scalar", "Scalar"],
        ["", "[4096]", "", "", "1e-05", "True"],
    ),
    "aten::native_layer_norm": _shapes(
        [_ACT, [], [4096], [4096], []], [_BF16, "ScalarList", _BF16, _BF16, "Scalar"]
    ),
    "aten::empty": _shapes(
        [[], [], [], [], [], []],
        ["ScalarList", "Scalar", "", "Device", "Scalar", ""],
        ["[1, 4096, 4096]", "15", "", "cuda:0", "False", ""],
    ),
    "aten::add": _shapes([_ACT, _ACT, []], [_BF16, _BF16, "Scalar"], ["", "", "1"]),
    "aten::gelu": _shapes([[1, 4096, 11008], []], [_BF16, "String"], ["", "none"]),
    "aten::view": _shapes([_ACT, []], [_BF16, "ScalarList"], ["", "[1, 4096, 32, 128]"]),
    "aten::transpose": _shapes([[1, 4096, 32, 128], [], []], [_BF16, "Scalar", "Scalar"]),
    "aten::as_strided": _shapes([[1, 4096, 32, 128], [], [], []], [_BF16, "", "", ""]),
    "aten::scaled_dot_product_attention": _shapes(
        [[1, 32, 4096, 128]] * 3 + [[], [], []], [_BF16] * 3 + ["", "Scalar", "Scalar"]
    ),
    "aten::copy_": _shapes([[8, 4096], [8, 4096], []], ["long int", "long int", "Scalar"]),
    "aten::_fused_adamw_": _shapes([[], [], [], [], [], []], ["TensorList"] * 6),
}
NO_SHAPES = ', "Input Dims": [], "Input type": [], "Input Strides": [], "Concrete Inputs": []'


class Kernel(NamedTuple):
    """One GPU activity a launch runs, with its pre-serialised launch configuration."""

    cat: str  # "kernel", "gpu_memcpy" or "gpu_memset"
    name: str
    runtime: str  # the CUDA runtime call that launches it
    cbid: int
    min_ns: int
    span_ns: int  # duration is min_ns + U[0, span_ns)
    tail: str  # launch config lines; for memcpy/memset the byte count
    nbytes: int = 0


class Op(NamedTuple):
    """One CPU op: its cpu_op names (parent first, launches in the last) and kernels."""

    cpu: tuple[str, ...]
    kernels: tuple[Kernel, ...] = ()


def _config(regs: int, smem: int, per_sm: tuple[float, float], grid: int, block: int) -> str:
    blocks, warps = per_sm
    return (
        f'"registers per thread": {regs},\n      "shared memory": {smem},\n'
        f'      "blocks per SM": {blocks:.6f},\n      "warps per SM": {warps:.6f},\n'
        f'      "grid": [{grid}, 1, 1],\n      "block": [{block}, 1, 1],\n'
        f'      "est. achieved occupancy %": {min(100, round(warps / 64 * 100))}'
    )


def _kernel(name: str, us: tuple[int, int], config: str) -> Kernel:
    return Kernel("kernel", name, "cudaLaunchKernel", 211, us[0] * 1000, us[1] * 1000, config)


_GEMM_CFG = _config(232, 98304, (0.969697, 7.757576), 128, 256)
_EW_CFG = _config(28, 0, (496.484848, 1985.939394), 65536, 128)
_LN_CFG = _config(40, 0, (31.030303, 31.030303), 4096, 32)
_FLASH_CFG = _config(255, 49152, (0.969697, 3.878788), 128, 128)
_ADAM_CFG = _config(64, 0, (2.424242, 9.696970), 320, 512)
_NCCL_CFG = _config(96, 0, (0.181818, 0.727273), 24, 640)
_EW = "void at::native::vectorized_elementwise_kernel<4, {f}, at::detail::Array<char*, {n}> >"
_EW_ARGS = "(int, {f}, at::detail::Array<char*, {n}>)"


def _elementwise(functor: str, arity: int) -> str:
    return (_EW + _EW_ARGS).format(f=functor, n=arity)


GEMM_TN = _kernel(
    "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn", (40, 260), _GEMM_CFG
)
GEMM_NN = _kernel(
    "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_nn", (40, 260), _GEMM_CFG
)
GEMM_NT = _kernel(
    "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_nt", (40, 260), _GEMM_CFG
)
ADD = _kernel(_elementwise("at::native::CUDAFunctor_add<c10::BFloat16>", 3), (8, 20), _EW_CFG)
_GELU = (
    "at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}"
    "::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}"
)
GELU = _kernel(_elementwise(_GELU, 2), (20, 30), _EW_CFG)
GELU_BWD = _kernel(_elementwise(_GELU.replace("Gelu", "GeluBackward"), 3), (25, 35), _EW_CFG)
_LN_NS = "void at::native::(anonymous namespace)::"
LAYER_NORM = _kernel(
    _LN_NS + "vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float, c10::BFloat16 "
    "const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)",
    (10, 15),
    _LN_CFG,
)
LN_GRAD = _kernel(
    _LN_NS + "layer_norm_grad_input_kernel<c10::BFloat16, float>(c10::BFloat16 const*, "
    "c10::BFloat16 const*, float const*, float const*, c10::BFloat16 const*, c10::BFloat16*, int)",
    (15, 20),
    _LN_CFG,
)
LN_GAMMA = _kernel(
    _LN_NS + "GammaBetaBackwardCUDAKernel_32x32<c10::BFloat16, float>(long, long, "
    "c10::BFloat16 const*, c10::BFloat16 const*, float const*, float const*, c10::BFloat16*, "
    "c10::BFloat16*)",
    (12, 10),
    _LN_CFG,
)
_FLASH = (
    "void pytorch_flash::flash_{k}<pytorch_flash::Flash_{t}_kernel_traits<128, 128, 64, 4, false, "
    "false, cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<128, 128, 64, 4, "
    "cutlass::bfloat16_t> >, false, true, false, false, true, true, false>"
    "(pytorch_flash::Flash_{t}_params)"
)
FLASH_FWD = _kernel(_FLASH.format(k="fwd_kernel", t="fwd"), (300, 120), _FLASH_CFG)
FLASH_DOT = _kernel(_FLASH.format(k="bwd_dot_do_o_kernel", t="bwd"), (12, 6), _FLASH_CFG)
FLASH_BWD = _kernel(
    _FLASH.format(k="bwd_dq_dk_dv_loop_seqk_parallel_kernel", t="bwd"), (800, 300), _FLASH_CFG
)
FLASH_DQ = _kernel(_FLASH.format(k="bwd_convert_dq_kernel", t="bwd"), (15, 6), _FLASH_CFG)
ADAMW = _kernel(
    _LN_NS + "multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata"
    "<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<c10::BFloat16, 4, "
    "(at::native::ADAM_MODE)1, false>, double, double, double, double, double, bool, double*, "
    "double*>(at::native::(anonymous namespace)::TensorListMetadata<4>, ...)",
    (600, 900),
    _ADAM_CFG,
)
NCCL_ALLREDUCE = _kernel(
    "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", (0, 0), _NCCL_CFG
)
H2D = Kernel(
    "gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", "cudaMemcpyAsync", 41, 3000, 2000, "", 65536
)
D2H = Kernel(
    "gpu_memcpy", "Memcpy DtoH (Device -> Pinned)", "cudaMemcpyAsync", 41, 1500, 800, "", 4
)
D2D = Kernel(
    "gpu_memcpy", "Memcpy DtoD (Device -> Device)", "cudaMemcpyAsync", 41, 9000, 4000, "", 33554432
)
MEMSET = Kernel("gpu_memset", "Memset (Device)", "cudaMemsetAsync", 51, 1200, 900, "", 1 << 20)

_LINEAR = ("aten::linear", "aten::t", "aten::mm")
LINEAR = Op(_LINEAR, (GEMM_TN,))
LN = Op(("aten::layer_norm", "aten::native_layer_norm"), (LAYER_NORM,))
SDPA = Op(
    (
        "aten::scaled_dot_product_attention",
        "aten::_scaled_dot_product_flash_attention",
        "aten::_flash_attention_forward",
    ),
    (FLASH_FWD,),
)
VIEW = Op(("aten::view",))
TRANSPOSE = Op(("aten::transpose", "aten::as_strided"))


def _bwd(node: str, *cpu: str, kernels: tuple[Kernel, ...] = ()) -> Op:
    return Op((f"autograd::engine::evaluate_function: {node}", node, *cpu), kernels)


LN_BWD = _bwd(
    "NativeLayerNormBackward0", "aten::native_layer_norm_backward", kernels=(LN_GRAD, LN_GAMMA)
)
MM_BWD = _bwd("MmBackward0", "aten::mm", kernels=(GEMM_NN, GEMM_NT))
GELU_BWD_OP = _bwd("GeluBackward0", "aten::gelu_backward", kernels=(GELU_BWD,))
SDPA_BWD = _bwd(
    "ScaledDotProductFlashAttentionBackward0",
    "aten::_flash_attention_backward",
    kernels=(FLASH_DOT, FLASH_BWD, FLASH_DQ),
)

# A transformer block: (forward op, backward op) in forward order; the backward runs reversed.
BLOCK: tuple[tuple[Op, Op], ...] = (
    (LN, LN_BWD),
    (LINEAR, MM_BWD),
    (VIEW, _bwd("ViewBackward0", "aten::view")),
    (TRANSPOSE, _bwd("TransposeBackward0")),
    (SDPA, SDPA_BWD),
    (TRANSPOSE, _bwd("TransposeBackward0")),
    (Op(("aten::contiguous", "aten::copy_"), (D2D,)), _bwd("CloneBackward0")),
    (VIEW, _bwd("ViewBackward0", "aten::view")),
    (LINEAR, MM_BWD),
    (Op(("aten::add",), (ADD,)), _bwd("AddBackward0")),
    (LN, LN_BWD),
    (LINEAR, MM_BWD),
    (Op(("aten::gelu",), (GELU,)), GELU_BWD_OP),
    (LINEAR, MM_BWD),
    (Op(("aten::add",), (ADD,)), _bwd("AddBackward0")),
)
ACCUMULATE_GRAD = _bwd("torch::autograd::AccumulateGrad")
GRADS_PER_BUCKET = 2  # AccumulateGrad ops before each gradient bucket's all-reduce
INPUT_COPY = Op(("aten::to", "aten::_to_copy", "aten::empty_strided", "aten::copy_"), (H2D,))
ZERO = Op(("aten::zero_", "aten::fill_"), (MEMSET,))
FUSED_ADAMW = Op(("aten::_fused_adamw_",), (ADAMW,))
BUCKET_NELEMS = (6_291_456, 12_582_912, 13_107_200, 4_194_304)


class Collective(NamedTuple):
    """What an NCCL kernel's launch adds: its message, its transfer time, what it waits for."""

    nelems: int
    dur_ns: int
    after_ns: int  # the gradients it reduces are ready when the compute stream gets here


@dataclass
class GenInfo:
    """What the generator wrote: the counts the parsers are checked against."""

    path: Path
    bytes: int = 0
    steps: int = 0
    nccl_kernels: int = 0
    gpu_ops: int = 0  # compute kernels, memcpys and memsets
    counts: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0
    scaled_from: str = ""  # a real trace written again to size: checked against the ijson path

    @property
    def events(self) -> int:
        return sum(self.counts.values())


class TraceGen:
    """Emits one training step at a time: its CPU events in order and its device events.

    Times are integer nanoseconds (written as µs with 3 decimals, exactly). The CPU clock
    `t` moves through the ops of the main thread; each stream is busy until `free[stream]`.
    """

    def __init__(self, seed: int, info: GenInfo) -> None:
        self.r = random.Random(seed).random
        self.info = info
        self.counts = info.counts
        self.t = T0_NS
        self.free = {COMPUTE: T0_NS, COMM: T0_NS}
        self.cpu: list[str] = []
        self.dev: list[tuple[int, int, str]] = []
        self.fwd_flows: list[int] = []
        self.seq = itertools.count()
        self.ext = itertools.count(1)
        self.ev = itertools.count()
        self.corr = itertools.count(1)
        self.flow = itertools.count(1)
        self.py = itertools.count(1)
        self.allocated = 8 << 30

    # -------------------------------------------------------------- primitives

    def _tick(self, lo_ns: int, span_ns: int) -> None:
        self.t += lo_ns + int(self.r() * span_ns)

    def _open(self) -> int:
        self.cpu.append("")
        return len(self.cpu) - 1

    def _close(self, slot: int, cat: str, name: str, start: int, args: str) -> None:
        self.cpu[slot] = CPU_X % (cat, name, start / 1000, (self.t - start) / 1000, args)
        self.counts[cat] += 1

    def _device(self, ts: int, text: str) -> None:
        self.dev.append((ts, next(self.seq), text))

    def _memory(self) -> None:
        size = 1 << (12 + int(self.r() * 14))
        self._memory_event(size)
        if self.r() < P_FREE:
            self._tick(300, 600)
            self._memory_event(-size)

    def _memory_event(self, size: int) -> None:
        self.allocated += size
        addr = 0x7F3A_0000_0000 + (self.allocated & 0xFFFF_FFFF)
        self.cpu.append(MEMORY % (self.t / 1000, 24 << 30, self.allocated, size, addr))
        self.counts["cpu_instant_event"] += 1

    def _runtime(self, name: str, cbid: int, ext: int, dur: int) -> int:
        corr = next(self.corr)
        args = (name, self.t / 1000, dur / 1000, ext, cbid, corr)
        self._device(self.t, RUNTIME % args)
        self.counts["cuda_runtime"] += 1
        return corr

    # -------------------------------------------------------------- ops

    def launch(
        self, kernel: Kernel, ext: int, stream: int = COMPUTE, comm: Collective | None = None
    ) -> None:
        """A runtime call on the main thread and the GPU activity it starts on `stream`."""
        r = self.r
        if r() < P_CAPTURE_CHECK:
            self._runtime("cudaStreamIsCapturing", 317, ext, 600 + int(r() * 900))
            self._tick(600, 900)
        launch_ts, dur = self.t, 2500 + int(r() * 5000)
        corr = self._runtime(kernel.runtime, kernel.cbid, ext, dur)
        self._device(launch_ts, FLOW_S % (corr, launch_ts / 1000, "ac2g", "ac2g"))
        self.t += dur
        start = max(launch_ts + 3000 + int(r() * 4000), self.free[stream])
        dur = kernel.min_ns + int(r() * kernel.span_ns)
        if comm is not None:
            start, dur = max(start, comm.after_ns), dur + comm.dur_ns
        self.free[stream] = start + dur
        queued, tail = self._gpu_args(kernel, dur, comm)
        times = (start / 1000, dur / 1000)
        text = GPU % (kernel.cat, kernel.name, stream, *times, ext, queued, stream, corr, tail)
        self._device(start, text)
        self._device(start, FLOW_F % (corr, 0, stream, start / 1000, "ac2g", "ac2g"))
        self.counts["ac2g"] += 2
        self.counts[kernel.cat] += 1
        if comm is not None:
            self.info.nccl_kernels += 1
        else:
            self.info.gpu_ops += 1
        if r() < P_EVENT_RECORD:
            self._tick(300, 700)
            self._runtime("cudaEventRecord", 135, ext, 800 + int(r() * 1200))
            self._tick(800, 1200)

    @staticmethod
    def _gpu_args(kernel: Kernel, dur: int, comm: Collective | None) -> tuple[str, str]:
        """The kernel-only `queued` field and the args after `correlation`."""
        if kernel.cat != "kernel":
            return "", MEMCPY_TAIL % (kernel.nbytes, kernel.nbytes / dur)
        if comm is not None:
            return QUEUED, kernel.tail + NCCL_TAIL % (comm.nelems, comm.nelems)
        return QUEUED, kernel.tail

    def op(self, op: Op, flow: str = "") -> None:
        """One CPU op with its children, its launches and its fwd/bwd flow end."""
        slot, start, ext, ev = self._open(), self.t, next(self.ext), next(self.ev)
        flow_slot = self._open() if flow else -1
        self._tick(1500, 3000)
        if op.kernels:
            self._memory()
        for i, name in enumerate(op.cpu[1:], 1):
            self._child(name, op.kernels if i == len(op.cpu) - 1 else ())
        if len(op.cpu) == 1:
            for kernel in op.kernels:
                self.launch(kernel, ext)
        self._tick(500, 1500)
        name = op.cpu[0]
        self._close(slot, "cpu_op", name, start, OP_ARGS % (ext, ev, SHAPES.get(name, NO_SHAPES)))
        if flow:
            self._flow(flow_slot, flow, start)

    def _child(self, name: str, kernels: tuple[Kernel, ...]) -> None:
        slot, start, ext, ev = self._open(), self.t, next(self.ext), next(self.ev)
        self._tick(800, 2500)
        for kernel in kernels:
            self.launch(kernel, ext)
        self._tick(400, 1200)
        self._close(slot, "cpu_op", name, start, OP_ARGS % (ext, ev, SHAPES.get(name, NO_SHAPES)))

    def _flow(self, slot: int, phase: str, ts: int) -> None:
        if phase == "s":
            flow_id = next(self.flow)
            self.fwd_flows.append(flow_id)
            self.cpu[slot] = FLOW_S % (flow_id, ts / 1000, "fwdbwd", "fwdbwd")
        else:
            flow_id = self.fwd_flows.pop()
            self.cpu[slot] = FLOW_F % (flow_id, PID, PID, ts / 1000, "fwdbwd", "fwdbwd")
        self.counts["fwdbwd"] += 1

    def span(self, cat: str, name: str) -> tuple[int, int, str]:
        """Open a user_annotation or python_function span; pass the result to `end`."""
        slot, start = self._open(), self.t
        if cat == "python_function":
            py = next(self.py)
            args = PY_ARGS % (py - 1, py)
        else:
            args = OP_ARGS % (next(self.ext), next(self.ev), "")
        self._tick(1000, 2000)
        return slot, start, args

    def end(self, opened: tuple[int, int, str], cat: str, name: str) -> None:
        self._tick(500, 1500)
        slot, start, args = opened
        self._close(slot, cat, name, start, args)

    # -------------------------------------------------------------- a training step

    def step(self, number: int) -> None:
        step_span = self.span("user_annotation", f"ProfilerStep#{number}")
        for _ in range(2):
            self.op(INPUT_COPY)
        zero_grad = self.span("user_annotation", "Optimizer.zero_grad#AdamW.zero_grad")
        self.end(zero_grad, "user_annotation", "Optimizer.zero_grad#AdamW.zero_grad")
        ddp = self.span("user_annotation", "DistributedDataParallel.forward")
        for layer in range(LAYERS_PER_STEP):
            module = self.span("python_function", f"nn.Module: TransformerBlock_{layer}")
            for forward, _ in BLOCK:
                self.op(forward, flow="s")
            self.end(module, "python_function", f"nn.Module: TransformerBlock_{layer}")
        self.end(ddp, "user_annotation", "DistributedDataParallel.forward")
        self.op(ZERO)
        for _ in range(LAYERS_PER_STEP):
            self._backward_block()
        self._runtime("cudaStreamWaitEvent", 146, next(self.ext), 1500)
        self.free[COMPUTE] = max(self.free[COMPUTE], self.free[COMM])
        self._tick(2000, 1000)
        adamw = self.span("user_annotation", "Optimizer.step#AdamW.step")
        for _ in range(4):
            self.op(FUSED_ADAMW)
        self.end(adamw, "user_annotation", "Optimizer.step#AdamW.step")
        self._item_sync()
        self.end(step_span, "user_annotation", f"ProfilerStep#{number}")
        self.info.steps += 1
        self.t = max(self.t, self.free[COMPUTE], self.free[COMM]) + 20_000 + int(self.r() * 40_000)

    def _backward_block(self) -> None:
        buckets = (len(BLOCK) // 2, len(BLOCK))  # a gradient bucket is ready after each
        for i, (_, backward) in enumerate(reversed(BLOCK), 1):
            self.op(backward, flow="f")
            if i in buckets:
                for _ in range(GRADS_PER_BUCKET):
                    self.op(ACCUMULATE_GRAD)
                self.op(ZERO)
                self.allreduce(BUCKET_NELEMS[int(self.r() * len(BUCKET_NELEMS))])

    def allreduce(self, nelems: int) -> None:
        """c10d::allreduce_ > record_param_comms > nccl:all_reduce > the NCCL kernel."""
        c10d = self._open(), self.t, next(self.ext), next(self.ev)
        self._tick(3000, 4000)
        record = self._open(), self.t, next(self.ext), next(self.ev)
        self._tick(2000, 3000)
        annotation = self.span("user_annotation", "nccl:all_reduce")
        self._runtime("cudaStreamWaitEvent", 146, record[2], 1200)
        self._tick(1500, 1000)
        bus_ns = int(nelems * 2 * 2 * (WORLD - 1) / WORLD / GB_PER_S_BUS)
        grads_ready = self.free[COMPUTE]
        self.launch(NCCL_ALLREDUCE, record[2], COMM, Collective(nelems, bus_ns, grads_ready))
        self.end(annotation, "user_annotation", "nccl:all_reduce")
        comm_args = RECORD_COMMS_ARGS % (nelems, nelems, nelems)
        self._close(
            record[0], "cpu_op", "record_param_comms", record[1], OP_ARGS % (*record[2:], comm_args)
        )
        self._tick(2000, 2000)
        shapes = C10D_SHAPES % nelems
        self._close(c10d[0], "cpu_op", "c10d::allreduce_", c10d[1], OP_ARGS % (*c10d[2:], shapes))

    def _item_sync(self) -> None:
        """loss.item(): a DtoH copy, then the CPU waits for the compute stream."""
        slot, start, ext, ev = self._open(), self.t, next(self.ext), next(self.ev)
        self._tick(1500, 1500)
        self._child("aten::_local_scalar_dense", (D2H,))
        wait = max(self.free[COMPUTE] - self.t, 0) + 3000 + int(self.r() * 3000)
        self._runtime("cudaStreamSynchronize", 131, ext, wait)
        self.t += wait
        self._tick(500, 1000)
        self._close(slot, "cpu_op", "aten::item", start, OP_ARGS % (ext, ev, NO_SHAPES))

    def drain(self, cpu_out: TextSink, dev_out: TextSink) -> None:
        """Write the step's CPU events and its device events (in time order), then forget them."""
        cpu_out.writelines(self.cpu)
        self.dev.sort()
        dev_out.writelines([text for _, _, text in self.dev])
        self.cpu.clear()
        self.dev.clear()

    def footer_events(self) -> Iterable[str]:
        """Kineto's trailing metadata events and the closing 'Record Window End'."""
        ts = self.t / 1000
        rows = [
            ("process_name", PID, 0, "name", '"python"'),
            ("process_labels", PID, 0, "labels", '"CPU"'),
            ("thread_name", PID, PID, "name", f'"thread {PID} (python)"'),
            ("process_name", 0, 0, "name", '"python"'),
            ("process_labels", 0, 0, "labels", '"GPU 0"'),
            ("thread_name", 0, COMPUTE, "name", f'"stream {COMPUTE} "'),
            ("thread_name", 0, COMM, "name", f'"stream {COMM} "'),
        ]
        for name, pid, tid, key, value in rows:
            yield METADATA % (name, ts, pid, tid, key, value)
        yield RECORD_WINDOW_END % ts
        self.counts["M"] += len(rows)
        self.counts["Record Window End"] += 1


def header() -> str:
    """Kineto's top-level keys before `traceEvents`, in its order."""
    device = (
        '    {\n      "id": %d, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85045379072,\n'
        '      "computeMajor": 9, "computeMinor": 0,\n'
        '      "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,\n'
        '      "regsPerBlock": 65536, "warpSize": 32,\n'
        '      "sharedMemPerBlock": 49152, "numSms": 132\n'
        '    , "regsPerMultiprocessor": 65536, "sharedMemPerBlockOptin": 232448, '
        '"sharedMemPerMultiprocessor": 233472\n    }'
    )
    info = {
        "backend": "nccl",
        "rank": 0,
        "world_size": WORLD,
        "pg_count": 1,
        "pg_config": [
            {
                "pg_name": "0",
                "pg_desc": "default_pg",
                "backend_config": "cuda:nccl",
                "pg_size": WORLD,
                "ranks": list(range(WORLD)),
            }
        ],
        "nccl_version": "2.21.5",
    }
    devices = ",\n".join(device % i for i in range(WORLD))
    return (
        '{\n  "schemaVersion": 1,\n  "deviceProperties": [\n'
        f'{devices}\n  ],\n  "distributedInfo": {json.dumps(info)},\n  "traceEvents": [\n'
    )


class TextSink(Protocol):
    def write(self, text: str, /) -> int: ...

    def writelines(self, lines: Iterable[str], /) -> None: ...


class ByteCounter:
    """A write-only text sink that only counts (the traces are ASCII)."""

    def __init__(self) -> None:
        self.count = 0

    def write(self, text: str) -> int:
        self.count += len(text)
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        self.count += sum(map(len, lines))


def write_trace(out: TextSink, dev: TextSink, steps: int, seed: int, info: GenInfo) -> None:
    """Header and CPU section to `out`; the device section and trailing events to `dev`."""
    gen = TraceGen(seed, info)
    out.write(header())
    for number in range(steps):
        gen.step(number)
        gen.drain(out, dev)
    dev.writelines(gen.footer_events())


def steps_for(target_bytes: int, seed: int) -> int:
    """Steps to write for `target_bytes`, from the size of a few generated steps."""
    sink = ByteCounter()
    write_trace(sink, sink, CALIBRATION_STEPS, seed, GenInfo(Path()))
    per_step = sink.count / CALIBRATION_STEPS
    return max(1, round(target_bytes / per_step))


def generate(path: Path, target_mb: int, seed: int) -> GenInfo:
    """Write a Kineto-shaped trace of about `target_mb` MB to `path` (streamed, seeded)."""
    started = time.perf_counter()
    steps = steps_for(target_mb * MB, seed)
    info = GenInfo(path)
    buffering = 1 << 20
    with (
        path.open("w", encoding="ascii", buffering=buffering, newline="\n") as out,
        tempfile.TemporaryFile(
            "w+", encoding="ascii", buffering=buffering, dir=path.parent, newline="\n"
        ) as dev,
    ):
        write_trace(out, dev, steps, seed, info)
        dev.seek(0)
        shutil.copyfileobj(dev, out, 4 * MB)
        out.write(FOOTER % (BASE_TIME_NS // 10**9, BASE_TIME_NS))
    info.bytes = path.stat().st_size
    info.seconds = time.perf_counter() - started
    return info


REAL_TRACE = Path("../shared/traces/kineto/single_rank/v100_allreduce_216k_events_rank1.json.gz")
_EVENT_SEP = b"\n  },\n  {"  # Kineto's separator between two events at the indent it uses
_SHIFTED = re.compile(rb'("ts": |"correlation": )(\d+)')
TS_STEP_US, CORRELATION_STEP = 2_000_000, 10_000_000  # the trace spans 1.83 s, ids < 10^6


def shifted(region: bytes, copy: int, ts_step_us: int = TS_STEP_US) -> bytes:
    """Copy number `copy` of the events: later in time, with launch ids of its own."""

    def shift(match: re.Match[bytes]) -> bytes:
        step = ts_step_us if match.group(1).startswith(b'"ts"') else CORRELATION_STEP
        return match.group(1) + str(int(match.group(2)) + copy * step).encode()

    return _SHIFTED.sub(shift, region) if copy else region


def scale_real(
    path: Path,
    target_mb: int,
    source: Path = REAL_TRACE,
    ts_step_us: int = TS_STEP_US,
    compact: bool = False,
) -> GenInfo:
    """Write `source`'s header, its events again and again cut at an event boundary to about
    `target_mb` MB, then its trailer (see the module docstring); `compact`: each part written
    again as compact JSON (`--layout compact`)."""
    started = time.perf_counter()
    head, region, tail = _parts(gzip.decompress(source.read_bytes()))
    write = compact_events if compact else bytes
    if compact:
        head, tail = compact_head(head), compact_tail(tail)
    size = len(write(region)) if compact else len(region)
    copies, rest = divmod(target_mb * MB - len(head) - len(tail), size + 2)
    cut = region.rfind(_EVENT_SEP, 0, rest * len(region) // size)
    pieces = [region] * copies + ([region[: cut + 4]] if cut > 0 else [])
    with path.open("wb") as out:
        out.write(head)
        for number, piece in enumerate(pieces or [region]):
            events = write(shifted(piece, number, ts_step_us))
            out.write((b"," if compact else b",\n") + events if number else events)
        out.write(tail)
    info = GenInfo(path, bytes=path.stat().st_size, scaled_from=source.name)
    info.seconds = time.perf_counter() - started
    info.counts["copies"] = copies
    return info


def _parts(doc: bytes) -> tuple[bytes, bytes, bytes]:
    """A document in Kineto's layout as the bytes before its first event, its events, and
    the bytes after the last."""
    first = doc.index(b"\n  {", doc.index(b'"traceEvents"')) + 1
    last = doc.rindex(b"\n  }") + 4  # the last event's `}` (the document's own is unindented)
    return doc[:first], doc[first:last], doc[last:]


def written(doc: bytes, compact: bool) -> bytes:
    """A document in Kineto's layout, as `--layout` writes it."""
    if not compact:
        return doc
    head, region, tail = _parts(doc)
    return compact_head(head) + compact_events(region) + compact_tail(tail)


COMPACT_PIECE_BYTES = 4 * MB  # events re-serialised this many bytes of Kineto's at a time


def compact_events(region: bytes) -> bytes:
    """Kineto-layout events (`  {...},\n  {...}`) as compact JSON (`{...},{...}`): what
    `json.dump(..., separators=(",", ":"))` writes, the keys in their order."""
    out, start = [], 0
    while start < len(region):
        end = region.find(_EVENT_SEP, start + COMPACT_PIECE_BYTES)
        end = len(region) if end < 0 else end + 4  # the `}` of the piece's last event
        out.append(msgspec.json.encode(msgspec.json.decode(b"[" + region[start:end] + b"]"))[1:-1])
        start = end + 2 if end < len(region) else end  # past `,\n`
    return b",".join(out)


def compact_head(head: bytes) -> bytes:
    """The document's bytes before the first event, compact: `{...,"traceEvents":[`."""
    keys = json.loads(head.rstrip()[:-1] + b"[]}")
    return msgspec.json.encode(keys)[: -len(b"]}")]


def compact_tail(tail: bytes) -> bytes:
    """The document's bytes after the last event, compact: `],...}`."""
    after = tail[tail.index(b"]") + 1 :].strip()
    keys = json.loads(b"{" + after[1:] if after.startswith(b",") else b"{}")
    return b"]" + (b"," + msgspec.json.encode(keys)[1:] if keys else b"}")


DENSE_SOURCE_MB = 8  # the generated rank trace scaled to size (`--input dense`)


def dense_source(workdir: Path, density: float, compact: bool) -> tuple[Path, int, str]:
    """One rank of `tests/simjob.py`'s TorchTitan-like job (16 ranks: tp 8, pp 2), its filler
    set for `density` collectives per MB as `compact` writes it, of ~DENSE_SOURCE_MB: (the
    .json.gz in Kineto's layout, the µs its steps span, for the copies' time step, what it
    holds)."""
    from simjob import Job, step_every_ns, trace_text

    def size(filler: int) -> tuple[int, int]:
        text = trace_text(Job(16, steps=2, filler=filler, windows=1), 0, 0).encode()
        return len(written(text, compact)), text.count(b'"record_param_comms"')

    (bare, calls), (more, _) = size(0), size(8)
    filler = max(0, round((calls / density * MB - bare) / ((more - bare) / 8)))
    steps = max(2, round(2 * DENSE_SOURCE_MB * MB / size(filler)[0]))
    job = Job(16, steps=steps, filler=filler, windows=1)
    path = workdir / f"dense_source_{density:g}_{'compact' if compact else 'kineto'}.json.gz"
    text = trace_text(job, 0, 0).encode()
    path.write_bytes(gzip.compress(text, compresslevel=1))
    calls = text.count(b'"record_param_comms"')
    mb = len(written(text, compact)) / MB
    note = f"simjob rank 0 of 16 (tp 8, pp 2), {steps} steps, filler {filler}: {calls:,} "
    note += f"collectives in {mb:.1f} MB = {calls / mb:.1f} a MB"
    return path, -(-(steps + 1) * step_every_ns(job) // 10**9) * 10**6, note


# ---------------------------------------------------------------- the child: one parse


def parse_commscope(path: str, fast: bool = True) -> dict[str, Any]:
    from commscope.collector.kineto import TraceReader
    from commscope.model.schema import CommOp, CpuSpan, GpuOp, Step

    kinds: Counter[type] = Counter()
    started = _clocks()
    with open(path, "rb") as f:
        reader = TraceReader(f, path, fast=fast)
        for batch in reader.batches():
            kinds.update(map(type, batch))
    cpu, wall = _elapsed(started)
    meta, stats = reader.meta, reader.stats
    return {
        "cpu_s": cpu,
        "wall_s": wall,
        "events": stats.events,
        "parser": reader.parser,
        "comm_ops": kinds[CommOp],
        "gpu_ops": kinds[GpuOp],
        "steps": kinds[Step],
        "cpu_spans": kinds[CpuSpan],
        "dropped": stats.dropped,
        "sizes_unknown": stats.sizes_unknown,
        "meta": {
            "rank": meta.rank,
            "world_size": meta.world_size,
            "gpu_name": meta.gpu_name,
            "base_time_ns": meta.base_time_ns,
            "nccl_version": meta.nccl_version,
        },
    }


def parse_ijson(path: str) -> dict[str, Any]:
    import ijson

    count = 0
    started = _clocks()
    with open(path, "rb") as f:
        for _ in ijson.items(f, "traceEvents.item", use_float=True):
            count += 1
    cpu, wall = _elapsed(started)
    return {"cpu_s": cpu, "wall_s": wall, "events": count}


def parse_json_load(path: str) -> dict[str, Any]:
    started = _clocks()
    with open(path, "rb") as f:
        document = json.load(f)
    cpu, wall = _elapsed(started)
    return {"cpu_s": cpu, "wall_s": wall, "events": len(document["traceEvents"])}


PAIRED_SLICE_MB = 25
PAIRED_ITEMS = 4096  # bare ijson's items taken between two looks at the bytes it has read


class _Counted:
    """A binary file that counts the bytes read from it (bare ijson's progress)."""

    def __init__(self, raw: Any) -> None:
        self.raw, self.bytes = raw, 0

    def read(self, size: int = -1) -> bytes:
        data: bytes = self.raw.read(size)
        self.bytes += len(data)
        return data


def parse_paired(path: str) -> dict[str, Any]:
    """commscope's default reader and bare ijson on the same file in one child, in turns of
    PAIRED_SLICE_MB of input each, CPU time summed per parser: both see the same load, which
    on a shared machine changes from one child to the next (the ratio of separate children
    swings 1.5-2.9x under load 8-12)."""
    import ijson
    from commscope.collector.kineto import TraceReader

    cpu, going, mark, read = [0.0, 0.0], [True, True], 0, [0]
    with open(path, "rb") as f, open(path, "rb") as g:
        reader = TraceReader(f, path, on_chunk=lambda n: read.__setitem__(0, read[0] + n))
        batches, counted = reader.batches(), _Counted(g)
        items = ijson.items(counted, "traceEvents.item", use_float=True)
        count = 0
        while any(going):
            mark += PAIRED_SLICE_MB * MB
            started = time.process_time()
            going[0] = going[0] and next((True for _ in batches if read[0] >= mark), False)
            between = time.process_time()
            while going[1] and counted.bytes < mark:
                taken = sum(1 for _ in itertools.islice(items, PAIRED_ITEMS))
                count += taken
                going[1] = taken == PAIRED_ITEMS
            cpu[0] += between - started
            cpu[1] += time.process_time() - between
    return {"cpu_s": cpu[0], "ijson_cpu_s": cpu[1], "wall_s": None, "events": count,
            "parser": reader.parser, "commscope_events": reader.stats.events}  # fmt: skip


def parse_report(path: str) -> dict[str, Any]:
    """The whole `commscope report` of the one file (`--jobs 1`, so in this process: parse,
    reduce, the report written): its CPU time, and the path each trace was read by (a miss
    to the ijson path recorded as it happens)."""
    from commscope.collector.kineto import TraceReader
    from commscope.service.cli import main

    misses: list[str] = []
    to_ijson = TraceReader._to_ijson

    def record(reader: TraceReader, reason: str) -> None:
        misses.append(reason)
        to_ijson(reader, reason)

    TraceReader._to_ijson = record  # type: ignore[method-assign]
    out = tempfile.mkdtemp(prefix="commscope-report-")
    started = _clocks()
    code = main(["report", path, "--out", out, "--jobs", "1", "--no-progress"])
    cpu, wall = _elapsed(started)
    shutil.rmtree(out, ignore_errors=True)
    if code != 0:
        raise BenchError(f"commscope report exited {code}")
    parser = f"ijson ({misses[0]})" if misses else "fast"
    return {"cpu_s": cpu, "wall_s": wall, "events": None, "parser": parser}


# Categories no handler of the normaliser reads, in the bench's inputs (real, dense): their
# `args` are read raw by `report-rawargs`. A category in neither list, or an event without
# one (Kineto's metadata), sends its chunk to the fast path's own decoder.
IGNORED_CATEGORIES = ("ac2g", "python_function", "Trace", "fwdbwd", "gpu_user_annotation")


def parse_report_rawargs(path: str) -> dict[str, Any]:
    """`parse_report` with the fast path's decoder patched (see the module docstring: bench
    only): events are a union tagged by `cat`, `args` typed as the product types it for the
    categories the normaliser reads and msgspec.Raw for the others, so the choice is made in
    msgspec's C code, per event, with no Python loop."""
    from commscope.collector import fastparse
    from commscope.collector.normalize import Normalizer

    used = [cat for cat, handler in Normalizer().handlers.items() if handler is not None]
    fields = [f for f in msgspec.structs.fields(fastparse.FastEvent) if f.name != "cat"]
    typed = next(f.type for f in fields if f.name == "args")

    def variant(cat: str, args: Any) -> Any:
        spec = [(f.name, args if f.name == "args" else f.type, None) for f in fields]
        kind = msgspec.defstruct(f"Event_{cat}", spec, tag=cat, tag_field="cat", gc=False,
                                 forbid_unknown_fields=True)  # fmt: skip
        kind.cat = cat  # what the normaliser's `feed` reads
        return kind

    variants = [variant(c, typed) for c in used] + [
        variant(c, msgspec.Raw) for c in IGNORED_CATEGORIES
    ]
    tagged = msgspec.json.Decoder(list[Union[tuple(variants)]])  # type: ignore[misc]  # noqa: UP007
    plain = fastparse._EVENTS

    class Events:
        def decode(self, chunk: bytes | memoryview) -> list[Any]:
            try:
                return tagged.decode(bytes(chunk))  # a Raw holds a view of its input
            except msgspec.ValidationError:  # a category in neither list, or none
                return plain.decode(chunk)

    fastparse._EVENTS = Events()  # type: ignore[assignment]
    return parse_report(path)


CHILD_IMPORTS = {
    "commscope": ("commscope.collector.kineto", "commscope.model.schema"),
    "commscope-ijson": ("commscope.collector.kineto", "commscope.model.schema"),
    "ijson": ("ijson",),
    "json.load": (),
    "paired": ("commscope.collector.kineto", "ijson"),
    "report": ("commscope.collector.kineto", "commscope.service.cli", "ijson"),
    "report-rawargs": ("commscope.collector.kineto", "commscope.service.cli", "ijson"),
}
PARSERS = {
    "commscope": parse_commscope,
    "commscope-ijson": lambda path: parse_commscope(path, fast=False),
    "ijson": parse_ijson,
    "json.load": parse_json_load,
    "paired": parse_paired,
    "report": parse_report,
    "report-rawargs": parse_report_rawargs,
}


def _clocks() -> tuple[float, float]:
    return time.process_time(), time.perf_counter()


def _elapsed(started: tuple[float, float]) -> tuple[float, float]:
    return time.process_time() - started[0], time.perf_counter() - started[1]


def child_main(method: str, path: str, limit_gb: float) -> int:
    """Parse once under an address-space limit; print one JSON line for the parent."""
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (int(limit_gb * 2**30), hard))
    for module in CHILD_IMPORTS[method]:
        importlib.import_module(module)  # before the start RSS; the parse is timed without it
    start_rss = peak_rss_mb()
    try:
        result = PARSERS[method](path)
    except MemoryError:
        result = {"exceeded_gb": limit_gb}
    result.update(method=method, start_rss_mb=start_rss, peak_rss_mb=peak_rss_mb())
    result["ru_maxrss_mb"] = ru_maxrss_mb()
    print(json.dumps(result), flush=True)
    return 0


# ---------------------------------------------------------------- the parent


class BenchError(Exception):
    """A child failed, or a parser's output does not match what was written."""


@dataclass
class Row:
    size_mb: float
    method: str
    events: int = 0
    cpu_s: float | None = None
    wall_s: float | None = None
    peak_rss_mb: float = 0.0
    start_rss_mb: float = 0.0
    exceeded_gb: float | None = None
    runs: int = 0
    paired: list[float] = field(default_factory=list)  # paired child: ijson CPU / commscope's

    def cpu_mbps(self) -> float | None:
        return self.size_mb / self.cpu_s if self.cpu_s else None

    def wall_mbps(self) -> float | None:
        return self.size_mb / self.wall_s if self.wall_s else None


def warm(path: Path) -> None:
    """Read the input once, so every child starts from the page cache (json.load's child,
    ~10 GB at 2 GB, evicts it: the next child, commscope's, would pay the disk reads in its
    CPU time)."""
    with path.open("rb", buffering=0) as f:
        while f.read(1 << 20):
            pass


def run_child(method: str, path: Path, limit_gb: float) -> dict[str, Any]:
    warm(path)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", method, str(path)]
    cmd += ["--as-limit-gb", str(limit_gb)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        if "MemoryError" in proc.stderr:  # raised where the child could not catch it
            return {"method": method, "exceeded_gb": limit_gb, "peak_rss_mb": 0.0}
        tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
        raise BenchError(f"{method} child failed (exit {proc.returncode}) on {path}:\n{tail}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def check(result: dict[str, Any], info: GenInfo) -> None:
    """Raise BenchError unless the parse saw what the generator wrote."""
    if "exceeded_gb" in result:
        return
    if info.scaled_from or result["method"] in ("paired", "report", "report-rawargs"):
        _check_parser(result)
    if info.scaled_from or result["method"].startswith("report"):
        return
    expected = {"events": info.events}
    if result["method"].startswith("commscope"):
        _check_parser(result)
        expected |= {"comm_ops": info.nccl_kernels, "gpu_ops": info.gpu_ops, "steps": info.steps}
        want_meta = {"rank": 0, "world_size": WORLD, "base_time_ns": BASE_TIME_NS}
        want_meta |= {"gpu_name": "NVIDIA H100 80GB HBM3", "nccl_version": "2.21.5"}
        for key, value in want_meta.items():
            if result["meta"][key] != value:
                raise BenchError(f"commscope meta.{key} = {result['meta'][key]!r}, want {value!r}")
    for key, value in expected.items():
        if result[key] != value:
            raise BenchError(
                f"{result['method']} on {info.path.name}: {key} = {result[key]}, "
                f"but the generator wrote {value}"
            )


def _check_parser(result: dict[str, Any]) -> None:
    """Raise BenchError unless a commscope child read the events by the path it names (the
    paired child: by the fast path, as many events as bare ijson beside it)."""
    if result["method"] == "paired":
        if result["parser"] != "fast" or result["commscope_events"] != result["events"]:
            raise BenchError(
                f"paired child: {result['parser']} path, "
                f"{result['commscope_events']} events, ijson {result['events']}"
            )
        return
    if not result["method"].startswith(("commscope", "report")):
        return
    want = "ijson" if result["method"] == "commscope-ijson" else "fast"
    if result["parser"] != want:
        raise BenchError(f"{result['method']} read by the {result['parser']} path")


SAME_BOTH_WAYS = ("events", "comm_ops", "gpu_ops", "steps", "cpu_spans", "dropped")
SAME_BOTH_WAYS += ("sizes_unknown", "meta")


def check_same(results: dict[str, dict[str, Any]]) -> None:
    """Raise BenchError unless the fast path gave what the ijson path gave, and bare ijson
    counted as many items (one round of children on the same input)."""
    fast, slow = results.get("commscope"), results.get("commscope-ijson")
    if fast is None or slow is None or "exceeded_gb" in fast or "exceeded_gb" in slow:
        return
    for key in SAME_BOTH_WAYS:
        if fast[key] != slow[key]:
            raise BenchError(f"fast path {key} = {fast[key]!r}, ijson path {slow[key]!r}")
    bare = results.get("ijson", {}).get("events", slow["events"])
    if bare != slow["events"]:
        raise BenchError(f"bare ijson read {bare} items, commscope {slow['events']}")


def bench_size(
    info: GenInfo, repeat: int, limit_gb: float, methods: tuple[str, ...] = METHODS
) -> list[Row]:
    """Every method `repeat` times, round-robin; best CPU and wall time, largest RSS."""
    rows = {m: Row(info.bytes / MB, m) for m in methods}
    for _ in range(repeat):
        results: dict[str, dict[str, Any]] = {}
        for method, row in rows.items():
            if row.exceeded_gb is not None:
                continue
            result = results[method] = run_child(method, info.path, limit_gb)
            check(result, info)
            _merge(row, result)
            note = _note(result)
            print(f"    {method:<10} {note}", flush=True)
        check_same(results)
        for report in ("report", "report-rawargs"):
            if report in results and "ijson" in results:
                rows[report].paired.append(results["ijson"]["cpu_s"] / results[report]["cpu_s"])
    return list(rows.values())


def _merge(row: Row, result: dict[str, Any]) -> None:
    row.runs += 1
    row.peak_rss_mb = max(row.peak_rss_mb, result.get("peak_rss_mb", 0.0))
    row.start_rss_mb = result.get("start_rss_mb", 0.0)
    if "exceeded_gb" in result:
        row.exceeded_gb = result["exceeded_gb"]
        return
    row.events = result["events"] or row.events
    row.cpu_s = min(row.cpu_s or float("inf"), result["cpu_s"])
    if result["wall_s"] is not None:
        row.wall_s = min(row.wall_s or float("inf"), result["wall_s"])
    if "ijson_cpu_s" in result:
        row.paired.append(result["ijson_cpu_s"] / result["cpu_s"])


def _note(result: dict[str, Any]) -> str:
    if "exceeded_gb" in result:
        return f"exceeded {result['exceeded_gb']:g} GB"
    if result["method"] == "paired":
        return (f"cpu commscope {result['cpu_s']:.1f}s, ijson {result['ijson_cpu_s']:.1f}s "
                f"-> {result['ijson_cpu_s'] / result['cpu_s']:.2f}x")  # fmt: skip
    note = f"cpu {result['cpu_s']:.1f}s wall {result['wall_s']:.1f}s"
    note += f" peak RSS {result['peak_rss_mb']:.0f} MB"
    if result["method"].startswith("commscope"):
        note += f", {result['comm_ops']} CommOps, {result['cpu_spans']} CpuSpans"
        if result["dropped"] or result["sizes_unknown"]:
            note += f", dropped {result['dropped']}, sizes unknown {result['sizes_unknown']}"
    return note


def _fmt(value: float | None, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def table(rows: list[Row]) -> str:
    head = f"{'size MB':>8}  {'method':<10} {'events':>10} {'CPU MB/s':>9} {'wall MB/s':>10} "
    head += f"{'peak RSS MB':>12} {'start RSS MB':>13} {'vs ijson':>9}"
    lines = [head, "-" * len(head)]
    for row in rows:
        ratio = _ratio(row, rows)
        speed = f"{_fmt(row.cpu_mbps()):>9} {_fmt(row.wall_mbps()):>10}"
        if row.exceeded_gb is not None:
            speed = f"{f'exceeded {row.exceeded_gb:g} GB':>20}"
        lines.append(
            f"{row.size_mb:>8.1f}  {row.method:<10} {row.events or '-':>10} {speed} "
            f"{_fmt(row.peak_rss_mb, '.0f'):>12} {_fmt(row.start_rss_mb, '.0f'):>13} "
            f"{_fmt(ratio, '.2f') + 'x' if ratio else '-':>9}"
        )
    return "\n".join(lines)


def _ratio(row: Row, rows: list[Row]) -> float | None:
    if row.paired:
        return statistics.median(row.paired)
    base = next(r for r in rows if r.size_mb == row.size_mb and r.method == "ijson")
    mine, theirs = row.cpu_mbps(), base.cpu_mbps()
    return mine / theirs if mine and theirs else None


def readme_lines(rows: list[Row], repeat: int) -> str:
    out = [f"commscope vs bare ijson, CPU-time speed (best of {repeat}), peak RSS:"]
    for row in rows:
        if row.method.startswith("report"):
            out.append(
                f"- {row.size_mb:,.0f} MB trace: the whole `commscope report` (--jobs 1"
                f"{', args raw' if row.method != 'report' else ''}) vs "
                f"bare ijson, each in its own child, in turns: ijson CPU / report CPU = "
                f"{_fmt(_ratio(row, rows), '.2f')}x (median of {len(row.paired)} rounds: "
                + ", ".join(f"{r:.2f}" for r in row.paired)
                + ")"
            )
        elif row.paired:
            out.append(
                f"- {row.size_mb:,.0f} MB trace: paired (one child, {PAIRED_SLICE_MB} MB turns "
                f"each): ijson CPU / commscope CPU = {_fmt(_ratio(row, rows), '.2f')}x "
                f"(median of {len(row.paired)})"
            )
        if not row.method.startswith("commscope"):
            continue
        base = next(r for r in rows if r.size_mb == row.size_mb and r.method == "ijson")
        out.append(
            f"- {row.size_mb:,.0f} MB trace: {row.method} {_fmt(row.cpu_mbps())} MB/s, "
            f"ijson {_fmt(base.cpu_mbps())} MB/s -> {_fmt(_ratio(row, rows), '.2f')}x; "
            f"peak RSS {row.peak_rss_mb:.0f} MB (ijson {base.peak_rss_mb:.0f} MB)"
        )
    return "\n".join(out)


def machine() -> str:
    import ijson

    return (
        f"{cpu_and_python()}, "
        f"ijson {ijson.__version__} backend {ijson.backend}, "
        f"{datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}"
    )


def describe(info: GenInfo) -> str:
    if info.scaled_from:
        return (
            f"  wrote {info.bytes / MB:.1f} MB in {info.seconds:.1f}s: {info.scaled_from}'s "
            f"events {info.counts['copies']} times over, then cut at an event boundary"
        )
    mix = ", ".join(f"{cat} {100 * n / info.events:.1f}%" for cat, n in info.counts.most_common())
    return (
        f"  generated {info.bytes / MB:.1f} MB in {info.seconds:.1f}s: {info.steps} steps, "
        f"{info.events:,} events, {info.nccl_kernels} NCCL kernels, "
        f"{info.bytes / info.events:.0f} B/event\n  mix: {mix}"
    )


@contextmanager
def scratch(args: argparse.Namespace) -> Iterator[Path]:
    """The inputs' folder (`--keep`, else a temporary one removed after)."""
    workdir = Path(args.keep or tempfile.mkdtemp(prefix="commscope-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        yield workdir
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


def bench(args: argparse.Namespace) -> int:
    sizes = [DEFAULT_SIZES_MB[0]] if args.quick else args.sizes
    print(machine(), flush=True)
    print(f"sizes {sizes} MB, repeat {args.repeat}, address-space limit {args.as_limit_gb:g} GB")
    print(f"input: {args.input}" + (f" ({REAL_TRACE.name} scaled)" if args.input == "real" else ""))
    print(f"layout: {args.layout}")
    rows: list[Row] = []
    with scratch(args) as workdir:
        source = (REAL_TRACE, TS_STEP_US)
        if args.input == "dense":
            *source, note = dense_source(workdir, args.density, args.layout == "compact")  # type: ignore[assignment]
            print(f"dense input: {note}", flush=True)
        for size in sizes:
            started = time.perf_counter()
            path = workdir / f"{args.layout}_{args.input}_{size}MB.json"
            info = (
                generate(path, size, args.seed)
                if args.input == "synthetic"
                else scale_real(path, size, *source, compact=args.layout == "compact")
            )
            print(describe(info), flush=True)
            if abs(info.bytes - size * MB) > 0.05 * size * MB:
                raise BenchError(f"{info.path.name} is {info.bytes / MB:.1f} MB, not {size} MB ±5%")
            rows += bench_size(info, args.repeat, args.as_limit_gb, args.methods)
            if not args.keep:
                info.path.unlink()
            print(f"  {size} MB done in {time.perf_counter() - started:.0f}s", flush=True)
    print()
    print(table(rows))
    print()
    print(readme_lines(rows, args.repeat))
    print(machine())
    return 0


# ---------------------------------------------------------------- instructions (callgrind)

CALLGRIND_BASE_MB = 1  # the run whose count is taken off: start-up, imports, and 1 MB


def instructions(method: str, path: Path, workdir: Path) -> int:
    """Instructions of one child under callgrind (`summary:` of its output file)."""
    out = workdir / f"callgrind.{method}.out"
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable]
    cmd += [str(Path(__file__).resolve()), "--child", method, str(path), "--as-limit-gb", "1024"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0 or not out.exists():
        raise BenchError(f"callgrind {method} on {path.name} failed:\n{proc.stderr[-2000:]}")
    _check_parser(json.loads(proc.stdout.strip().splitlines()[-1]))
    summary = next(line for line in out.read_text().splitlines() if line.startswith("summary:"))
    out.unlink()
    return int(summary.split()[1])


def callgrind(args: argparse.Namespace) -> int:
    """Instructions per MB of each method at each size, beyond a CALLGRIND_BASE_MB run of the
    same method (so start-up is left out): load cannot change them, so they show whether a
    parse costs more per MB as the file grows (an O(n) per event, a structure that grows),
    and, on a loaded machine, what a change saves (`report`: the whole command)."""
    counted = ("commscope", "commscope-ijson", "ijson", "report", "report-rawargs")
    methods = [m for m in args.methods if m in counted]
    print(machine(), flush=True)
    print(f"input: {args.input}, layout: {args.layout}")
    with scratch(args) as workdir:
        source = (REAL_TRACE, TS_STEP_US)
        if args.input == "dense":
            *source, note = dense_source(workdir, args.density, args.layout == "compact")  # type: ignore[assignment]
            print(f"dense input: {note}", flush=True)
        compact = args.layout == "compact"
        inputs = {
            mb: scale_real(workdir / f"{args.input}_{mb}MB.json", mb, *source, compact=compact)
            for mb in args.sizes
        }
        base = scale_real(workdir / "base.json", CALLGRIND_BASE_MB, *source, compact=compact)
        print(f"{'size MB':>8}  {'method':<16} {'M instructions':>15} {'M instr/MB':>11}")
        for method in methods:
            floor = instructions(method, base.path, workdir)
            for info in inputs.values():
                count = instructions(method, info.path, workdir)
                per_mb = (count - floor) / (info.bytes - base.bytes) * MB / 1e6
                print(f"{info.bytes / MB:>8.1f}  {method:<16} {count / 1e6:>15,.0f} "
                      f"{per_mb:>11.2f}", flush=True)  # fmt: skip
    return 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes",
        type=lambda s: [int(x) for x in s.split(",")],
        default=list(DEFAULT_SIZES_MB),
        help="input sizes in MB, comma-separated (default 50,500,2000)",
    )
    parser.add_argument("--quick", action="store_true", help="50 MB only")
    parser.add_argument(
        "--input",
        choices=("real", "synthetic", "dense"),
        default="real",
        help="a real trace scaled to size (default), the synthetic DDP trace, or a rank of "
        "tests/simjob.py's TorchTitan-like job at --density collectives a MB, scaled to size",
    )
    parser.add_argument(
        "--layout",
        choices=("kineto", "compact"),
        default="kineto",
        help="the input as Kineto writes it (default), or written again as compact JSON "
        "(json.dump with separators ',' ':'; real and dense inputs)",
    )
    parser.add_argument(
        "--density", type=float, default=86.0, help="collectives a MB of --input dense"
    )
    parser.add_argument("--repeat", type=int, default=2, help="runs per (size, method)")
    parser.add_argument(
        "--methods",
        type=lambda s: tuple(s.split(",")),
        default=METHODS,
        help="methods to run, comma-separated (default all; ijson is the baseline)",
    )
    parser.add_argument("--keep", metavar="DIR", help="write the inputs to DIR and keep them")
    parser.add_argument("--seed", type=int, default=SEED, help=argparse.SUPPRESS)
    parser.add_argument(
        "--as-limit-gb", type=float, default=12.0, help="address-space limit of each child"
    )
    parser.add_argument(
        "--callgrind",
        action="store_true",
        help="instructions per MB at each size instead (valgrind; ~50x slower: use small sizes)",
    )
    parser.add_argument("--child", nargs=2, metavar=("METHOD", "PATH"), help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.callgrind and args.input == "synthetic":
        print("--callgrind: a real or dense input", file=sys.stderr)
        return 2
    if args.layout == "compact" and args.input == "synthetic":
        print("--layout compact: a real or dense input", file=sys.stderr)
        return 2
    if args.child:
        return child_main(args.child[0], args.child[1], args.as_limit_gb)
    try:
        return callgrind(args) if args.callgrind else bench(args)
    except BenchError as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
