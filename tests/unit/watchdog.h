/*
 * watchdog.h - make a hung unit test say where it hangs, then abort.
 *
 * A test that hangs is killed by meson's timeout with nothing said about
 * why, and CI keeps only the log.  wd_arm() starts a thread that, unless
 * wd_disarm() comes first, after @seconds calls the test's @report (its own
 * view: what each of its threads was doing), then prints the stack of
 * every thread of the process, one at a time, and aborts.
 *
 * Stacks come from the sanitizer runtime where one is linked in (it
 * symbolizes), else from glibc's backtrace_symbols_fd (addresses of static
 * functions: resolve them with addr2line against the test binary).
 */
#ifndef RFT_TESTS_WATCHDOG_H
#define RFT_TESTS_WATCHDOG_H

#include <dirent.h>
#include <errno.h>
#include <execinfo.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

void __sanitizer_print_stack_trace(void) __attribute__((weak));

struct watchdog {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool disarmed;
	unsigned seconds;
	const char *what;
	void (*report)(void *arg);
	void *arg;
};

static _Atomic int wd_stack_done;

static void wd_stack_handler(int sig)
{
	(void)sig;
	if (__sanitizer_print_stack_trace) {
		__sanitizer_print_stack_trace();
	} else {
		void *pc[64];
		int n = backtrace(pc, 64);

		backtrace_symbols_fd(pc, n, STDERR_FILENO);
	}
	atomic_store(&wd_stack_done, 1);
}

/* Print every thread's stack but the caller's, one thread at a time. */
static void wd_print_stacks(void)
{
	struct sigaction sa = { .sa_handler = wd_stack_handler };
	pid_t self = (pid_t)syscall(SYS_gettid);
	DIR *d = opendir("/proc/self/task");
	struct dirent *de;

	sigemptyset(&sa.sa_mask);
	sigaction(SIGUSR2, &sa, NULL);
	if (!d)
		return;
	while ((de = readdir(d))) {
		pid_t tid = (pid_t)atoi(de->d_name);

		if (tid <= 0 || tid == self)
			continue;
		fprintf(stderr, "watchdog: --- thread %d:\n", (int)tid);
		fflush(stderr);
		atomic_store(&wd_stack_done, 0);
		if (syscall(SYS_tgkill, getpid(), tid, SIGUSR2) < 0)
			continue;
		/* A thread blocked with the signal masked does not answer. */
		for (int i = 0; i < 200 && !atomic_load(&wd_stack_done); i++)
			usleep(10000);
	}
	closedir(d);
}

static void *wd_main(void *arg)
{
	struct watchdog *wd = arg;
	struct timespec until;
	int rc = 0;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += wd->seconds;
	pthread_mutex_lock(&wd->lock);
	while (!wd->disarmed && rc != ETIMEDOUT)
		rc = pthread_cond_timedwait(&wd->cond, &wd->lock, &until);
	pthread_mutex_unlock(&wd->lock);
	if (wd->disarmed)
		return NULL;
	fprintf(stderr, "watchdog: %s still running after %u s; what its "
			"threads were doing:\n", wd->what, wd->seconds);
	if (wd->report)
		wd->report(wd->arg);
	fprintf(stderr, "watchdog: the stack of every thread:\n");
	fflush(stderr);
	wd_print_stacks();
	fprintf(stderr, "watchdog: %s hung: aborting\n", wd->what);
	fflush(stdout);
	abort();
}

static inline void wd_arm(struct watchdog *wd, const char *what,
			  unsigned seconds, void (*report)(void *), void *arg)
{
	memset(wd, 0, sizeof(*wd));
	pthread_mutex_init(&wd->lock, NULL);
	pthread_cond_init(&wd->cond, NULL);
	wd->what = what;
	wd->seconds = seconds;
	wd->report = report;
	wd->arg = arg;
	if (pthread_create(&wd->thread, NULL, wd_main, wd) != 0) {
		fprintf(stderr, "watchdog: cannot start: %s\n", strerror(errno));
		abort();
	}
}

static inline void wd_disarm(struct watchdog *wd)
{
	pthread_mutex_lock(&wd->lock);
	wd->disarmed = true;
	pthread_cond_signal(&wd->cond);
	pthread_mutex_unlock(&wd->lock);
	pthread_join(wd->thread, NULL);
	pthread_cond_destroy(&wd->cond);
	pthread_mutex_destroy(&wd->lock);
}

#endif /* RFT_TESTS_WATCHDOG_H */
