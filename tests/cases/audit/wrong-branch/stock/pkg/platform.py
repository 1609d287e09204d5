"""Platform look-alike: two priority lists in two branches of one function."""


def backend_priorities(major, use_mla):
    if use_mla:
        if major == 10:
            return [
                "CUTLASS",
                "FLASHMLA",
                "FLASHINFER",
                "TRITON",
                *sparse_backends(major),
            ]
        elif major == 12:
            return ["TRITON"]
        else:
            return [
                "FLASH_ATTN",
                "FLASHMLA",
                "FLASHINFER",
                "TRITON",
            ]
    else:
        return ["FLASH", "TRITON"]


def sparse_backends(major):
    return ["FLASHMLA_SPARSE"] if major >= 9 else []
