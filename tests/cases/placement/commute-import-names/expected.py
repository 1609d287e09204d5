from vllm.utils import (
    alpha,
    beta,
    beta_one,
    beta_two,
    gamma,
)
