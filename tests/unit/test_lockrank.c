/*
 * test_lockrank.c - the engine's lock order as the checker holds it
 * (engine_i.h's ranks and wrappers, common/rft_lockrank.h): each wrong
 * order aborts with a report naming the lock, where it was taken and what
 * was held; each order the comment allows runs through.  Every case runs
 * in a forked child, its stderr caught.  Skipped (77) in a build that does
 * not check (RFT_LOCK_CHECK 0: NDEBUG), where the wrappers are the plain
 * pthread calls.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine_i.h"

static struct eng eng;
static struct eng *e = &eng;
static struct file fa, fb;
static struct store *s = &eng.store;
static pthread_mutex_t par = PTHREAD_MUTEX_INITIALIZER;
/*
 * Locks in structures their owners alone see (pass.c's; core's copier
 * and loads, core_i.h): stand-ins of their ranks.
 */
static pthread_mutex_t pass_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t copier_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t loads_mu = PTHREAD_MUTEX_INITIALIZER;
#define pass_lock(e) eng_mutex_lock_at(&pass_mu, ENG_RANK_PASS, ENG_AT)
#define pass_unlock(e) eng_mutex_unlock_at(&pass_mu, ENG_RANK_PASS, ENG_AT)

/* Run @fn in a child; its exit status, and its stderr in @out. */
static int in_child(void (*fn)(void), char *out, size_t size)
{
	int fds[2], st = 0;
	size_t n = 0;
	ssize_t k;
	pid_t pid;

	assert_int_equal(pipe(fds), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct rlimit no_core = { 0, 0 };

		setrlimit(RLIMIT_CORE, &no_core);
		close(fds[0]);
		dup2(fds[1], STDERR_FILENO);
		fn();
		_exit(0);
	}
	close(fds[1]);
	while (n + 1 < size &&
	       (k = read(fds[0], out + n, size - 1 - n)) != 0) {
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			break;
		n += (size_t)k;
	}
	out[n] = '\0';
	close(fds[0]);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	return st;
}

/* @fn aborts, its report containing each of the strings after it. */
static void want_abort(void (*fn)(void), const char *what, ...)
{
	char out[4096];
	int st = in_child(fn, out, sizeof(out));
	va_list ap;
	const char *sub;

	if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGABRT)
		fail_msg("%s: status %#x, want SIGABRT; stderr: %s", what, st,
			 out);
	if (!strstr(out, "lock order: ") || !strstr(out, "test_lockrank.c:"))
		fail_msg("%s: no report: %s", what, out);
	va_start(ap, what);
	while ((sub = va_arg(ap, const char *)))
		if (!strstr(out, sub))
			fail_msg("%s: \"%s\" not in the report: %s", what, sub,
				 out);
	va_end(ap);
}

/* @fn runs through. */
static void want_ok(void (*fn)(void), const char *what)
{
	char out[4096];
	int st = in_child(fn, out, sizeof(out));

	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		fail_msg("%s: status %#x, want exit 0; stderr: %s", what, st,
			 out);
}

/* --- wrong orders ------------------------------------------------------- */

static void ns_under_file(void)
{
	file_wrlock(&fa);
	ns_rdlock(e);
}

static void two_files(void)
{
	file_rdlock(&fa);
	file_rdlock(&fb);
}

static void names_under_ns(void)
{
	ns_wrlock(e);
	eng_names_lock(e);
}

static void ns_twice(void)
{
	ns_rdlock(e);
	ns_rdlock(e);
}

static void file_under_pass(void)
{
	pass_lock(e);
	file_rdlock(&fa);
}

static void pass_under_store(void)
{
	store_lock(s);
	pass_lock(e);
}

static void store_under_leaf(void)
{
	leaf_lock(&copier_mu, ENG_RANK_COPIER);
	store_lock(s);
}

static void leaf_under_leaf(void)
{
	leaf_lock(&e->handles_lock, ENG_RANK_HANDLES);
	leaf_lock(&loads_mu, ENG_RANK_LOADS);
}

static void par_under_ns(void)
{
	ns_rdlock(e);
	leaf_lock(&par, ENG_RANK_PAR);
}

static void release_not_held(void)
{
	file_unlock(&fa);
}

/* Let go of the file's lock, then take it again under it: still wrong. */
static void file_after_release(void)
{
	file_wrlock(&fa);
	file_unlock(&fa);
	file_rdlock(&fb);
	ns_wrlock(e);
}

static void test_wrong_orders(void **state)
{
	(void)state;
	want_abort(ns_under_file, "ns under file",
		   "ns->lock waited for at", "holding file->lock",
		   "may be waited for holding names_lock", NULL);
	want_abort(two_files, "two files", "file->lock waited for",
		   "holding file->lock (x1", NULL);
	want_abort(names_under_ns, "names under ns",
		   "names_lock waited for", "holding ns->lock", NULL);
	want_abort(ns_twice, "ns read twice", "ns->lock waited for",
		   "holding ns->lock", NULL);
	want_abort(file_under_pass, "file under pass",
		   "file->lock waited for", "holding pass.lock", NULL);
	want_abort(pass_under_store, "pass under store",
		   "pass.lock waited for", "holding store->lock", NULL);
	want_abort(store_under_leaf, "store under a leaf",
		   "store->lock waited for", "holding copier.lock", NULL);
	want_abort(leaf_under_leaf, "leaf under a leaf",
		   "loads.lock waited for", "holding handles_lock", NULL);
	want_abort(par_under_ns, "par under ns", "par->lock waited for",
		   "holding ns->lock", "holding no lock", NULL);
	want_abort(release_not_held, "release not held",
		   "file->lock released, not held", "holding nothing", NULL);
	want_abort(file_after_release, "file after a release",
		   "ns->lock waited for", "holding file->lock (x1", NULL);
}

/* --- orders the comment allows ------------------------------------------ */

/* The whole order, outermost first, and back. */
static void whole_order(void)
{
	eng_names_lock(e);
	ns_wrlock(e);
	file_wrlock(&fa);
	pass_lock(e);
	store_lock(s);
	store_unlock(s);
	leaf_lock(&copier_mu, ENG_RANK_COPIER);
	leaf_unlock(&copier_mu, ENG_RANK_COPIER);
	pass_unlock(e);
	file_unlock(&fa);
	ns_unlock(e);
	eng_names_unlock(e);
	/* Let go, the order starts again. */
	file_rdlock(&fa);
	file_unlock(&fa);
	ns_rdlock(e);
	ns_unlock(e);
}

/* Eviction: files' locks tried under ns->lock and under each other. */
static void tries_under_ns(void)
{
	ns_rdlock(e);
	if (!file_trywrlock(&fa) || !file_trywrlock(&fb))
		_exit(3);
	file_unlock(&fb);
	file_unlock(&fa);
	ns_unlock(e);
}

/* Under pass.lock a file's lock is only tried. */
static void try_under_pass(void)
{
	file_wrlock(&fa);
	pass_lock(e);
	if (!file_tryrdlock(&fb))
		_exit(3);
	file_unlock(&fb);
	pass_unlock(e);
	file_unlock(&fa);
}

/* A try that fails counts nothing. */
static void failed_try(void)
{
	file_wrlock(&fa);
	if (file_trywrlock(&fa))
		_exit(3);
	file_unlock(&fa);
	ns_rdlock(e);
	ns_unlock(e);
}

/* store->lock under par->lock; leaves under each ranked lock alone. */
static void store_under_par(void)
{
	leaf_lock(&par, ENG_RANK_PAR);
	store_lock(s);
	store_unlock(s);
	leaf_unlock(&par, ENG_RANK_PAR);
	ns_rdlock(e);
	leaf_lock(&e->handles_lock, ENG_RANK_HANDLES);
	leaf_unlock(&e->handles_lock, ENG_RANK_HANDLES);
	ns_unlock(e);
	store_lock(s);
	leaf_lock(&loads_mu, ENG_RANK_LOADS);
	leaf_unlock(&loads_mu, ENG_RANK_LOADS);
	store_unlock(s);
}

/* Let go in any order. */
static void release_any_order(void)
{
	eng_names_lock(e);
	ns_rdlock(e);
	eng_names_unlock(e);
	file_rdlock(&fa);
	ns_unlock(e);
	file_unlock(&fa);
	eng_names_lock(e);
	eng_names_unlock(e);
}

/* Another thread's locks are its own. */
static void *hold_file(void *arg)
{
	(void)arg;
	file_rdlock(&fb);
	file_unlock(&fb);
	return NULL;
}

static void other_thread(void)
{
	pthread_t t;

	file_rdlock(&fa);
	if (pthread_create(&t, NULL, hold_file, NULL) != 0)
		_exit(3);
	pthread_join(t, NULL);
	file_unlock(&fa);
}

static void test_right_orders(void **state)
{
	(void)state;
	want_ok(whole_order, "the whole order");
	want_ok(tries_under_ns, "tries under ns");
	want_ok(try_under_pass, "a try under pass");
	want_ok(failed_try, "a failed try");
	want_ok(store_under_par, "store under par, leaves");
	want_ok(release_any_order, "release in any order");
	want_ok(other_thread, "another thread");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_wrong_orders),
		cmocka_unit_test(test_right_orders),
	};

#if !RFT_LOCK_CHECK
	printf("lock order not checked in this build (RFT_LOCK_CHECK)\n");
	return 77;
#endif
	pthread_mutex_init(&eng.names_lock, NULL);
	pthread_mutex_init(&eng.handles_lock, NULL);
	pthread_rwlock_init(&eng.ns.lock, NULL);
	pthread_mutex_init(&eng.store.lock, NULL);
	pthread_rwlock_init(&fa.lock, NULL);
	pthread_rwlock_init(&fb.lock, NULL);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
