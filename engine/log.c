/*
 * log.c - rft_err/warn/info/dbg.
 *
 * To syslog once the daemon is in the background; to stderr in the
 * foreground, a line each with the time and the level.  Under systemd
 * stderr is the journal's stream: then each line starts with its syslog
 * priority, "<4>" and the like (sd-daemon(3)), which the journal takes
 * as the line's priority (journalctl -p warning), and no time, which the
 * journal keeps itself.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "engine.h"
#include "rft_lockrank.h"

int rft_log_max = RFT_LOG_INFO;
static bool to_syslog;

/* A lock-order report (engine_i.h) where the log goes, once detached. */
static void lock_report(const char *line)
{
	syslog(LOG_ERR, "%s", line);
}

static pthread_once_t journal_once = PTHREAD_ONCE_INIT;
static bool to_journal;

/*
 * $JOURNAL_STREAM is "DEVICE:INODE" of the journal's stream that systemd
 * gave the service as its stdout or stderr (systemd.exec(5)): is stderr
 * that stream (not a file or pipe of another that inherited the variable)?
 */
static void journal_check(void)
{
	const char *js = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;

	to_journal = js && sscanf(js, "%llu:%llu", &dev, &ino) == 2 &&
		     fstat(STDERR_FILENO, &st) == 0 &&
		     (unsigned long long)st.st_dev == dev &&
		     (unsigned long long)st.st_ino == ino;
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
	pthread_once(&journal_once, journal_check);
	if (to_syslog) {
		syslog(level, "%s", msg);
	} else if (to_journal) {
		/* The levels are syslog's (engine.h). */
		fprintf(stderr, "<%d>%s: %s\n", level,
			names[level] ? names[level] : "", msg);
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
