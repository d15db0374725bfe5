/*
 * log.c - rft_err/warn/info/dbg.
 */
#include <stdio.h>
#include <string.h>
#include <syslog.h>
#include <time.h>

#include "engine.h"
#include "rft_lockrank.h"

int rft_log_max = RFT_LOG_INFO;
static bool to_syslog;

/* A lock-order report (engine_i.h) where the log goes, once detached. */
static void lock_report(const char *line)
{
	syslog(LOG_ERR, "%s", line);
}

void rft_log_syslog(const char *ident)
{
	openlog(ident, LOG_PID | LOG_NDELAY, LOG_DAEMON);
	to_syslog = true;
	rft_rank_on_report(lock_report);
}

void rft_logv(int level, const char *func, int line, const char *fmt,
	      va_list ap)
{
	static const char *const names[] = {
		[RFT_LOG_ERR] = "error", [RFT_LOG_WARN] = "warning",
		[RFT_LOG_INFO] = "info", [RFT_LOG_DBG] = "debug",
	};
	char msg[1024];
	int n = 0;

	if (level > rft_log_max)
		return;
	if (rft_log_max >= RFT_LOG_DBG)
		n = snprintf(msg, sizeof(msg), "%s:%d: ", func, line);
	vsnprintf(msg + n, sizeof(msg) - n, fmt, ap);
	if (to_syslog) {
		syslog(level, "%s", msg);
	} else {
		struct timespec ts;
		struct tm tm;
		char when[32];

		clock_gettime(CLOCK_REALTIME, &ts);
		localtime_r(&ts.tv_sec, &tm);
		strftime(when, sizeof(when), "%H:%M:%S", &tm);
		fprintf(stderr, "reftfsd %s.%03ld %s: %s\n", when,
			ts.tv_nsec / 1000000, names[level] ? names[level] : "",
			msg);
	}
}

void rft_log(int level, const char *func, int line, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	rft_logv(level, func, line, fmt, ap);
	va_end(ap);
}
