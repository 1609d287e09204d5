#include <stdio.h>

int add(int a, int b)
{
	/* sum */
	int s = a + b;
	return s;
}
