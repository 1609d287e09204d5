#include <stdio.h>

int add(int a, int b)
{
	/* sum */
	int s = a + b;
	if (s < 0)
		s = 0;
	return s;
}
