/*
 * rft_lockrank.c - the report of a lock-order violation (rft_lockrank.h).
 */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "rft_lockrank.h"

_Thread_local struct rft_held rft_held;

typedef void (*report_fn_t)(const char *line);
static _Atomic report_fn_t report_fn;

void rft_rank_on_report(void (*fn)(const char *line))
{
	atomic_store(&report_fn, fn);
}

/* Append to @buf (@size bytes, @*n used so far), never past its end. */
static void add(char *buf, size_t size, size_t *n, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static void add(char *buf, size_t size, size_t *n, const char *fmt, ...)
{
	va_list ap;
	int k;

	if (*n >= size)
		return;
	va_start(ap, fmt);
	k = vsnprintf(buf + *n, size - *n, fmt, ap);
	va_end(ap);
	if (k > 0)
		*n += (size_t)k;
}

static const char *rank_name(const struct rft_rank *ranks, unsigned nranks,
			     unsigned r)
{
	return r < nranks && ranks[r].name ? ranks[r].name : "?";
}

_Noreturn void rft_rank_fail(const struct rft_rank *ranks, unsigned nranks,
			     unsigned r, bool waiting, const char *file,
			     int line)
{
	char buf[2048];
	size_t n = 0;
	const char *sep = "";
	report_fn_t fn;

	add(buf, sizeof(buf), &n, "lock order: %s %s at %s:%d, holding ",
	    rank_name(ranks, nranks, r),
	    waiting ? "waited for" : "released, not held,", file, line);
	for (unsigned i = 0; i < RFT_RANKS_MAX; i++) {
		if (!rft_held.n[i])
			continue;
		add(buf, sizeof(buf), &n, "%s%s (x%u, last taken at %s:%d)",
		    sep, rank_name(ranks, nranks, i), rft_held.n[i],
		    rft_held.file[i], rft_held.line[i]);
		sep = ", ";
	}
	if (!*sep)
		add(buf, sizeof(buf), &n, "nothing");
	if (waiting && r < nranks) {
		add(buf, sizeof(buf), &n, "; %s may be waited for holding ",
		    rank_name(ranks, nranks, r));
		sep = "";
		for (unsigned i = 0; i < nranks; i++) {
			if (!(ranks[r].under & (1u << i)))
				continue;
			add(buf, sizeof(buf), &n, "%s%s", sep,
			    rank_name(ranks, nranks, i));
			sep = ", ";
		}
		if (!*sep)
			add(buf, sizeof(buf), &n, "no lock");
	}
	if (n >= sizeof(buf))
		n = sizeof(buf) - 1;
	buf[n] = '\0';
	fn = atomic_load(&report_fn);
	if (fn)
		fn(buf);
	else
		fprintf(stderr, "%s\n", buf);
	abort();
}
