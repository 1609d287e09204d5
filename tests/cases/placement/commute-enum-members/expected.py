import enum


class Backend(enum.Enum):
    FLASH = 1
    TRITON = 2
    TRITON_SPARSE = 4
    FLASH_SPARSE = 5
    SPARSE = 3
