import torch

from pkg.config import Config
from pkg.ops.common import pack_seq, unpack_seq
from pkg.ops.mqa_logits import (
    mqa_logits,
    paged_mqa_logits,
)
from pkg.ops.pcp import gather_k
from pkg.worker.workspace import current_workspace

if torch.cuda.is_available():
    import pkg.kernels
