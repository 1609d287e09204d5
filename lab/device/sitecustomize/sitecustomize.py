"""Make every Python process of a validation run (the driver, the engine core, each spawned worker) take vLLM's
sm_80 choices on a newer GPU, and record which capability checks and Triton compilations actually happened.

Python imports `sitecustomize` at start-up from any directory on PYTHONPATH; spawned workers inherit PYTHONPATH, so
each of them runs this too. Driven by environment variables:

VC_FAKE_CAPABILITY=8.0   vLLM's CUDA platform (`vllm.platforms.cuda`, both the NVML and non-NVML classes) and
                         `torch.cuda.get_device_capability` report this compute capability. The patch is installed
                         by an import hook the moment `vllm.platforms.cuda` is executed, before any caller can ask.
                         Triton still compiles for the real GPU (calls from Triton's own files get the real
                         capability): the sm_80 compile check is the separate compile gate. The value is read by
                         `parse_capability` of the tool's Ampere facts (`src/vllm_compose/ampere/
                         facts.py`), loaded by its path from the repository this file sits in: the device
                         call carries `src/` with `device/`, and loading the one file leaves `sys.path` (so what
                         the validated processes can import) as it was.
VC_RECORD_DIR=/path      each process appends JSON lines there (`<pid>.jsonl`):
                         {"kind": "capability", "caller": "vllm/...py:LINE func", "asked": ...} once per call site;
                         {"kind": "triton", "module": ..., "qualname": ..., "specialization": <triton JSON>} once per
                         Triton compilation (Triton's jit_cache_hook, called on each in-memory cache miss).
                         {"kind": "model-class", "class": "vllm...Class", ...} for each model `initialize_model`
                         builds (the target model, and the MTP draft's).
VC_CHECK_TOKEN_IDS=1     diagnostics for an out-of-range token id (lab/notebook/validation.md, open finding 2): every
                         `VocabParallelEmbedding.forward` checks its ids against the embedding's rows, and the MTP
                         draft's `compute_logits` counts rows that are not finite; each check synchronizes with the
                         GPU (lighter than CUDA_LAUNCH_BLOCKING, which hid the failure). A bad id is recorded
                         ({"kind": "bad-token-ids", ...} with the vLLM call stack) and raised as a RuntimeError; a
                         non-finite draft logit row is recorded ({"kind": "nonfinite-draft-logits", ...}).
VC_CHECK_TOKEN_IDS=async the same checks without a synchronization (a race hidden by CUDA_LAUNCH_BLOCKING may hide
                         from a synchronizing check too): per call site, counts of bad ids, the smallest and largest id
                         are accumulated on the GPU; bad ids are clamped into range so the run goes on; draft tokens
                         (`sample_draft`) and the speculator's `last_token_indices` and `num_rejected`
                         (`prepare_prefill_inputs`) are checked too. `flush_tally()` reads it all once and records
                         {"kind": "tally", ...} (lab/device/validate.py calls it in every worker after generating,
                         through collective_rpc with a function: VLLM_ALLOW_INSECURE_SERIALIZATION=1, as run_all.sh
                         sets it). Session 3 ran it: 0 bad values in the 9 generations it watched (none failed).
VC_SM80_PTX=90          every Triton compile of the process (vLLM's kernels and Inductor's alike) targets sm_80 (the
                         driver's current target answers capability 80, so layouts, LLVM and the PTX's `.target` are
                         sm_80's) and its PTX is assembled for the GPU named by the value (90: an H200), as the
                         driver's JIT does for a PTX-only image: an A100's instructions, run on Hopper. Uses
                         lab/device/sm80_ptx.py (loaded by its path); with VC_RECORD_DIR each compile is recorded
                         ({"kind": "sm80-ptx", "kernel", "ptx_target", "hopper_only_instructions", ...}).
VC_PP_SAME_STREAM=1      the V2 runner's PP sampled-token broadcasts (`pp_utils.PPHandler`) run on the main stream
                         instead of their side stream: if a failure goes away, it is a race with that stream.
"""

import importlib.abc
import importlib.util
import json
import os

# VC_SITE_DIRS: folders installed with `pip --target` (PYTHONPATH does not read their .pth files; nvidia-cutlass-dsl
# puts its packages on sys.path through one)
import site  # noqa: E402
import sys

for _dir in filter(None, os.environ.get("VC_SITE_DIRS", "").split(os.pathsep)):
    site.addsitedir(_dir)

_FAKE = os.environ.get("VC_FAKE_CAPABILITY")
_CHECK_IDS = os.environ.get("VC_CHECK_TOKEN_IDS") in ("1", "async")
_ASYNC = os.environ.get("VC_CHECK_TOKEN_IDS") == "async"
_SAME_STREAM = os.environ.get("VC_PP_SAME_STREAM") == "1"
_RECORD_DIR = os.environ.get("VC_RECORD_DIR")
_SM80_PTX = os.environ.get("VC_SM80_PTX")
_seen_callers = set()


def _record(obj):
    if not _RECORD_DIR:
        return
    try:
        os.makedirs(_RECORD_DIR, exist_ok=True)
        with open(os.path.join(_RECORD_DIR, f"{os.getpid()}.jsonl"), "a") as f:
            f.write(json.dumps(obj, default=str) + "\n")
    except OSError:
        pass


def _caller(depth_limit=8):
    """The nearest vllm source line that asked (skipping this file and the platform wrappers)."""
    frame = sys._getframe(2)
    for _ in range(depth_limit):
        if frame is None:
            break
        path = frame.f_code.co_filename
        if "vllm" in path and "platforms" not in path and "sitecustomize" not in path:
            idx = path.rfind("vllm/")
            return f"{path[idx:]}:{frame.f_lineno} {frame.f_code.co_name}"
        frame = frame.f_back
    return "?"


def _note_capability(asked):
    c = _caller()
    if c not in _seen_callers:
        _seen_callers.add(c)
        _record({"kind": "capability", "caller": c, "asked": asked, "pid": os.getpid()})


#: the tool's Ampere facts below the repository root (stdlib only, importing nothing of the tool)
_FACTS = os.path.join("src", "vllm_compose", "ampere", "facts.py")
_facts = None


def _ampere_facts():
    """The facts module of the repository this file sits in, loaded once by its path (see VC_FAKE_CAPABILITY)."""
    global _facts
    if _facts is None:
        here = os.path.dirname(os.path.abspath(__file__))
        while not os.path.isfile(os.path.join(here, _FACTS)):
            if os.path.dirname(here) == here:
                raise FileNotFoundError(f"sitecustomize: no {_FACTS} in a folder above {__file__}")
            here = os.path.dirname(here)
        spec = importlib.util.spec_from_file_location("_vc_ampere_facts", os.path.join(here, _FACTS))
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up there; a private name, not the tool's
        spec.loader.exec_module(module)
        _facts = module
    return _facts


def _fake_capability():
    """VC_FAKE_CAPABILITY as (major, minor)."""
    return _ampere_facts().parse_capability(_FAKE)


def _patch_platform(module):
    from vllm.platforms.interface import DeviceCapability

    major, minor = _fake_capability()

    def get_device_capability(cls, device_id=0):
        _note_capability("platform.get_device_capability")
        return DeviceCapability(major=major, minor=minor)

    for obj in list(vars(module).values()):
        if isinstance(obj, type) and "get_device_capability" in vars(obj):
            obj.get_device_capability = classmethod(get_device_capability)
    _record({"kind": "patched", "what": "vllm.platforms.cuda", "capability": _FAKE, "pid": os.getpid()})


def _vllm_stack(limit=12):
    """The vLLM frames of the current call stack, innermost first ("vllm/...py:LINE func")."""
    out, frame = [], sys._getframe(2)
    while frame is not None and len(out) < limit:
        path = frame.f_code.co_filename
        if "vllm/" in path and "sitecustomize" not in path:
            out.append(f"{path[path.rfind('vllm/') :]}:{frame.f_lineno} {frame.f_code.co_name}")
        frame = frame.f_back
    return out


def _patch_embedding(module):
    cls = module.VocabParallelEmbedding
    original = cls.forward

    def forward(self, input_):
        rows = self.weight.shape[0]
        if _ASYNC:
            return original(self, _TALLY.check("embedding", input_, 0, rows, clamp=True))
        bad = (input_ < 0) | (input_ >= rows)
        if bool(bad.any()):
            ids = input_[bad][:16].tolist()
            _record(
                {
                    "kind": "bad-token-ids",
                    "ids": ids,
                    "rows": rows,
                    "shape": list(input_.shape),
                    "stack": _vllm_stack(),
                    "pid": os.getpid(),
                }
            )
            raise RuntimeError(f"VC_CHECK_TOKEN_IDS: token ids {ids} outside the embedding's {rows} rows")
        return original(self, input_)

    cls.forward = forward
    _record({"kind": "patched", "what": module.__name__, "pid": os.getpid()})


def _patch_mtp_logits(module):
    cls = module.DeepSeekMTP
    original = cls.compute_logits

    def compute_logits(self, *args, **kwargs):
        logits = original(self, *args, **kwargs)
        if logits is not None and _ASYNC:
            import torch

            _TALLY.check("nonfinite-draft-logit-rows", (~torch.isfinite(logits)).any(dim=-1).int(), 0, 1)
        elif logits is not None:
            import torch

            rows = (~torch.isfinite(logits)).any(dim=-1)
            if bool(rows.any()):
                _record(
                    {
                        "kind": "nonfinite-draft-logits",
                        "rows": int(rows.sum()),
                        "of": int(rows.numel()),
                        "stack": _vllm_stack(),
                        "pid": os.getpid(),
                    }
                )
        return logits

    cls.compute_logits = compute_logits
    _record({"kind": "patched", "what": module.__name__, "pid": os.getpid()})


class _Tally:
    """Range checks that never synchronize: per check name and call site, the count of bad values and the smallest
    and largest value seen stay on the device (tensors or, in tests, numpy arrays) until `flush` reads them once.
    The allowed range may change from call to call (a batch's token count): the narrowest and widest are kept."""

    def __init__(self):
        self.sites = {}  # (name, stack) -> [bad, calls, lo, hi, lo_bound, narrowest hi_bound, widest hi_bound]

    def check(self, name, values, lo_bound, hi_bound, clamp=False):
        """Count the values outside [lo_bound, hi_bound); return them (clamped into range when `clamp`)."""
        if values.shape[0] == 0:
            return values
        bad = ((values < lo_bound) | (values >= hi_bound)).sum()
        lo, hi = values.min(), values.max()
        key = (name, tuple(_vllm_stack(6)))
        acc = self.sites.get(key)
        if acc is None:
            self.sites[key] = [bad, 1, lo, hi, lo_bound, hi_bound, hi_bound]
        else:
            acc[0] = acc[0] + bad
            acc[1] += 1
            acc[2] = acc[2].clip(max=lo)
            acc[3] = acc[3].clip(min=hi)
            acc[5], acc[6] = min(acc[5], hi_bound), max(acc[6], hi_bound)
        return values.clip(lo_bound, hi_bound - 1) if clamp else values

    def flush(self):
        """Read every site once (one synchronization) and record it; return the records."""
        out = []
        for (name, stack), (bad, calls, lo, hi, lo_bound, hi_narrow, hi_wide) in self.sites.items():
            out.append(
                {
                    "kind": "tally",
                    "check": name,
                    "bad": int(bad),
                    "calls": calls,
                    "min": int(lo),
                    "max": int(hi),
                    "range": [lo_bound, hi_narrow] if hi_narrow == hi_wide else [lo_bound, [hi_narrow, hi_wide]],
                    "stack": list(stack),
                    "pid": os.getpid(),
                }
            )
        for r in out:
            _record(r)
        return out


_TALLY = _Tally()


def flush_tally():
    return _TALLY.flush()


def _patch_speculator(module):
    """Check the speculator's draft tokens and the indices it gathers with (VC_CHECK_TOKEN_IDS=async)."""
    cls = module.DraftModelSpeculator
    original_sample = cls.sample_draft

    def sample_draft(self, hidden_states, *args, **kwargs):
        tokens = original_sample(self, hidden_states, *args, **kwargs)
        vocab = self.vllm_config.model_config.get_vocab_size()
        return _TALLY.check("draft-tokens", tokens, 0, vocab)

    cls.sample_draft = sample_draft
    _record({"kind": "patched", "what": module.__name__, "pid": os.getpid()})


def _patch_prefill_inputs(module):
    original = module.prepare_prefill_inputs

    def prepare_prefill_inputs(
        last_token_indices, current_draft_step, input_buffers, input_batch, num_sampled, num_rejected, *args, **kwargs
    ):
        out = original(
            last_token_indices,
            current_draft_step,
            input_buffers,
            input_batch,
            num_sampled,
            num_rejected,
            *args,
            **kwargs,
        )
        n = input_batch.num_reqs
        idx = last_token_indices[:n]
        idx[:] = _TALLY.check("last-token-indices", idx, 0, input_batch.num_tokens_after_padding, clamp=True)
        _TALLY.check("num-rejected", num_rejected[:n], 0, input_batch.num_tokens_after_padding + 1)
        return out

    module.prepare_prefill_inputs = prepare_prefill_inputs
    _record({"kind": "patched", "what": module.__name__, "pid": os.getpid()})


def _patch_pp_stream(module):
    cls = module.PPHandler
    original = cls.__init__

    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self.broadcast_stream = self.main_stream

    cls.__init__ = __init__
    _record({"kind": "patched", "what": module.__name__, "change": "broadcast on the main stream", "pid": os.getpid()})


def _patch_model_init(module):
    original = module.initialize_model

    def initialize_model(*args, **kwargs):
        model = original(*args, **kwargs)
        cls = type(model)
        _record(
            {
                "kind": "model-class",
                "class": f"{cls.__module__}.{cls.__qualname__}",
                "prefix": kwargs.get("prefix", ""),
                "pid": os.getpid(),
            }
        )
        return model

    module.initialize_model = initialize_model
    _record({"kind": "patched", "what": module.__name__, "pid": os.getpid()})


def _sm80_ptx_module():
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # lab/device, beside this folder
    spec = importlib.util.spec_from_file_location("_vc_sm80_ptx", os.path.join(here, "sm80_ptx.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _patch_triton_target(module):
    """`triton.backends.nvidia.driver`: the current target is sm_80 whatever the GPU (VC_SM80_PTX)."""
    from triton.backends.compiler import GPUTarget

    module.CudaDriver.get_current_target = lambda self: GPUTarget("cuda", 80, 32)


def _patch_triton_stages(module):
    """`triton.knobs`: assemble every sm_80 PTX for the GPU present (VC_SM80_PTX)."""

    if not _SM80_PTX.isdigit():  # raised into the importer of Triton: the run stops instead of taking sm_90
        raise ValueError(f"VC_SM80_PTX={_SM80_PTX!r}: give the GPU's architecture to assemble for, e.g. 90")

    def record(entry):
        _record({"kind": "sm80-ptx", **entry, "pid": os.getpid()})

    module.runtime.add_stages_inspection_hook = _sm80_ptx_module().stage_hook(record, int(_SM80_PTX))


#: module name -> function patching it right after it executes
_PATCHES = {}
if _SM80_PTX:
    _PATCHES["triton.backends.nvidia.driver"] = _patch_triton_target
    _PATCHES["triton.knobs"] = _patch_triton_stages
if _RECORD_DIR:
    # which model classes the run built (the DSA path of the release must be the one that ran)
    _PATCHES["vllm.model_executor.model_loader.utils"] = _patch_model_init
if _FAKE:
    _PATCHES["vllm.platforms.cuda"] = _patch_platform
if _CHECK_IDS:
    _PATCHES["vllm.model_executor.layers.vocab_parallel_embedding"] = _patch_embedding
    _PATCHES["vllm.model_executor.models.deepseek_mtp"] = _patch_mtp_logits
if _ASYNC:
    _PATCHES["vllm.v1.worker.gpu.spec_decode.speculator"] = _patch_speculator
    _PATCHES["vllm.v1.worker.gpu.spec_decode.autoregressive.speculator"] = _patch_prefill_inputs
if _SAME_STREAM:
    _PATCHES["vllm.v1.worker.gpu.pp_utils"] = _patch_pp_stream


class _PatchAfterExec(importlib.abc.MetaPathFinder):
    """Finds a module of `_PATCHES` through the other finders, then patches it right after it executes."""

    def find_spec(self, name, path, target=None):
        patch = _PATCHES.get(name)
        if patch is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        original_exec = loader.exec_module

        def exec_module(module):
            original_exec(module)
            try:
                patch(module)
            except Exception as exc:  # a diagnostic must not change the run it observes
                if name in ("vllm.platforms.cuda", "triton.backends.nvidia.driver", "triton.knobs"):
                    raise  # these change what runs: a silent failure would let the run claim a path it did not take
                _record({"kind": "patch-failed", "what": name, "error": repr(exc), "pid": os.getpid()})

        loader.exec_module = exec_module
        return spec


def _patch_torch():
    import torch.cuda

    major, minor = _fake_capability()
    real = torch.cuda.get_device_capability

    def get_device_capability(device=None):
        # Triton's driver picks its compile target through this function: it must see the real GPU, or it builds
        # sm_80 cubins that an H200 cannot load ("no kernel image is available").
        if "/triton/" in sys._getframe(1).f_code.co_filename:
            return real(device)
        _note_capability("torch.cuda.get_device_capability")
        real(device)  # keep torch's own checks (lazy init, bad index) in place
        return (major, minor)

    torch.cuda.get_device_capability = get_device_capability


def _install_triton_recorder():
    try:
        from triton import knobs
    except Exception as exc:  # Triton absent or too old: say so in the record, run on
        _record({"kind": "triton-recorder-missing", "error": repr(exc)})
        return

    def hook(*, key, repr, fn, compile, is_manual_warmup, already_compiled):
        _record(
            {
                "kind": "triton",
                "module": fn.module,
                "qualname": fn.name,
                "repr": repr,
                "specialization": compile.get("specialization_data"),
                "pid": os.getpid(),
            }
        )
        return False  # never skip the compilation itself

    knobs.runtime.jit_cache_hook = hook


if _PATCHES:
    sys.meta_path.insert(0, _PatchAfterExec())
if _FAKE:
    try:
        _patch_torch()
    except Exception as exc:
        _record({"kind": "torch-patch-failed", "error": repr(exc)})
if _RECORD_DIR:
    _install_triton_recorder()
