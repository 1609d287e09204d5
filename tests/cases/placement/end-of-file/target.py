import os
import sys


def main():
    # entry point
    print(os.getcwd(), sys.argv)
