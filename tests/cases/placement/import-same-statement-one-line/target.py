import os

from pkg.utils import alpha, delta, gamma
from pkg.yota import y
from pkg.zeta import z

X = 1
