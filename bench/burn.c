/*
 * burn.c
 *	  bench/prune's stand-in for a pass that only uses the CPU.
 *
 * burn SHARE SECONDS: for SECONDS, use SHARE (0 to 1) of one CPU and
 * nothing else: no WAL, no shared buffers, no locks, almost no memory.  It
 * computes in stretches of 50 microseconds without a system call, as the
 * worker reads and deletes 50 markers between two of its pauses, and
 * sleeps between stretches for as long as keeps it at SHARE.  Prints on
 * standard output the share of a CPU it did use (its user and system time
 * over its wall time), since the sleeps' cost and the scheduler's delays
 * make that differ a little from SHARE.
 *
 * With it in place of a pass, bench/prune tells what the worker's CPU
 * alone costs the claimers from what the rest of its work costs them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <sys/resource.h>

/* The length of one stretch of computing, in seconds. */
#define STRETCH 50e-6

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

	if (argc != 3 || (share = atof(argv[1])) <= 0 || share > 1 ||
		(seconds = atof(argv[2])) <= 0)
	{
		fprintf(stderr, "usage: burn SHARE SECONDS (0 < SHARE <= 1, SECONDS > 0)\n");
		return 2;
	}

	start = seconds_now();
	while ((now = seconds_now()) - start < seconds)
	{
		/* Behind the share: compute one stretch. */
		if (burned < share * (now - start))
		{
			double		until = now + STRETCH;

			while (seconds_now() < until)
				;
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
	printf("%.3f\n", cpu_seconds() / (seconds_now() - start));
	return 0;
}
