/*
 * ctl_path.c - the default control socket path of a mount (ctl_path.h).
 */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "ctl_path.h"

int rfs_ctl_default_path(const char *mountpoint, char *buf, size_t size)
{
	uint64_t h = 14695981039346656037ULL;
	char dir[PATH_MAX];
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	int n;

	/* FNV-1a: socket paths are short (108 bytes), mount points are not. */
	for (const unsigned char *p = (const unsigned char *)mountpoint; *p;
	     p++)
		h = (h ^ *p) * 1099511628211ULL;
	if (geteuid() == 0)
		snprintf(dir, sizeof(dir), "/run/reftfs");
	else if (xdg && *xdg)
		snprintf(dir, sizeof(dir), "%s/reftfs", xdg);
	else
		snprintf(dir, sizeof(dir), "/tmp/reftfs-%u",
			 (unsigned)geteuid());
	n = snprintf(buf, size, "%s/%016llx.sock", dir, (unsigned long long)h);
	return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}
