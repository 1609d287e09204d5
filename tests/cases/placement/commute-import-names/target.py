from vllm.utils import (
    alpha,
    beta,
    beta_two,
    gamma,
)
