import os
import sys


def main():
    # entry point
    print(os.getcwd(), sys.argv)


if __name__ == "__main__":
    main()
