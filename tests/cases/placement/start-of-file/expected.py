import json
import os
import sys

VERBOSE = False


def main():
    print(os.getcwd(), sys.argv)
