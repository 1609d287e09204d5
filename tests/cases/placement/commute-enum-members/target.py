import enum


class Backend(enum.Enum):
    FLASH = 1
    TRITON = 2
    FLASH_SPARSE = 5
    SPARSE = 3
