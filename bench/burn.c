/*
 * burn.c
 *	  bench/prune's stand-in for a pass that only uses the CPU (and, if
 *	  asked, the caches).
 *
 * burn SHARE SECONDS [MEGABYTES]: for SECONDS, use SHARE (0 to 1) of one
 * CPU and nothing else: no WAL, no shared buffers, no locks.  It computes
 * in stretches of 50 microseconds without a system call, as the worker
 * reads and deletes 50 markers between two of its pauses, and sleeps
 * between stretches for as long as keeps it at SHARE.  Without MEGABYTES
 * a stretch touches almost no memory (it reads the clock); with it, a
 * stretch writes to cache lines of a buffer of that size picked at random,
 * so that it pushes other processes' data out of the CPU's caches, as a
 * walk through shared buffers does.  Prints on standard output the share
 * of a CPU it did use (its user and system time over its wall time), since
 * the sleeps' cost and the scheduler's delays make that differ a little
 * from SHARE.
 *
 * With it in place of a pass, bench/prune tells what the worker's CPU
 * alone costs the claimers, and its CPU with that much memory, from what
 * the rest of its work costs them.
 */
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <sys/resource.h>

/* The length of one stretch of computing, in seconds. */
#define STRETCH 50e-6

/* A cache line, and how many a stretch touches between two clock reads. */
#define LINE 64
#define LINES_PER_CLOCK 64

static double
seconds_now(void)
{
	struct timespec ts;

	/* A vDSO call: no system call, so no chance for the scheduler. */
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double
cpu_seconds(void)
{
	struct rusage usage;

	getrusage(RUSAGE_SELF, &usage);
	return usage.ru_utime.tv_sec + usage.ru_utime.tv_usec / 1e6 +
		usage.ru_stime.tv_sec + usage.ru_stime.tv_usec / 1e6;
}

int
main(int argc, char **argv)
{
	double		share;
	double		seconds;
	double		start;
	double		now;
	double		burned = 0;
	double		setup_cpu;
	size_t		lines = 0;
	volatile unsigned char *memory = NULL;
	uint64_t	xorshift = 88172645463325252ULL;

	if (argc < 3 || argc > 4 || (share = atof(argv[1])) <= 0 || share > 1 ||
		(seconds = atof(argv[2])) <= 0 ||
		(argc == 4 && atof(argv[3]) <= 0))
	{
		fprintf(stderr, "usage: burn SHARE SECONDS [MEGABYTES] (0 < SHARE <= 1, SECONDS > 0, MEGABYTES > 0)\n");
		return 2;
	}
	if (argc == 4)
	{
		lines = (size_t) (atof(argv[3]) * 1024 * 1024 / LINE);
		if (lines == 0)
			lines = 1;
		/* calloc'd pages are mapped on first touch: touch them all now. */
		memory = calloc(lines, LINE);
		if (memory == NULL)
		{
			fprintf(stderr, "burn: out of memory\n");
			return 1;
		}
		for (size_t i = 0; i < lines; i++)
			memory[i * LINE] = 1;
	}

	setup_cpu = cpu_seconds();
	start = seconds_now();
	while ((now = seconds_now()) - start < seconds)
	{
		/* Behind the share: compute one stretch. */
		if (burned < share * (now - start))
		{
			double		until = now + STRETCH;

			while (seconds_now() < until)
			{
				/* A line at random (xorshift64), read and written. */
				for (int i = 0; memory != NULL && i < LINES_PER_CLOCK; i++)
				{
					xorshift ^= xorshift << 13;
					xorshift ^= xorshift >> 7;
					xorshift ^= xorshift << 17;
					memory[(xorshift % lines) * LINE]++;
				}
			}
			burned += STRETCH;
		}
		else
		{
			/* Ahead: sleep until the share catches up (at least 1 us). */
			double		ahead = burned / share - (now - start);
			struct timespec pause;

			if (ahead < 1e-6)
				ahead = 1e-6;
			pause.tv_sec = (time_t) ahead;
			pause.tv_nsec = (long) ((ahead - pause.tv_sec) * 1e9);

			nanosleep(&pause, NULL);
		}
	}
	printf("%.3f\n", (cpu_seconds() - setup_cpu) / (seconds_now() - start));
	return 0;
}
