/*
 * auth.c - the group's shared secret and the MACs made with it.
 *
 * HMAC-SHA256 comes from OpenSSL's libcrypto; nothing cryptographic is
 * written here.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <pthread.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include "engine.h"
#include "group_i.h"

int grp_secret_load(const char *path, struct grp_secret *out)
{
	struct stat st;
	uint8_t buf[GRP_SECRET_MAX + 2];
	size_t len = 0;
	ssize_t n;
	int fd, rc = 0;

	memset(out, 0, sizeof(*out));
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		rc = -errno;
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		rft_err("secret file %s is not a regular file", path);
		rc = -EINVAL;
		goto out;
	}
	if (st.st_uid != geteuid() && st.st_uid != 0) {
		rft_err("secret file %s belongs to uid %u, not to this daemon",
			path, (unsigned)st.st_uid);
		rc = -EPERM;
		goto out;
	}
	if (st.st_mode & (S_IRWXG | S_IRWXO)) {
		rft_err("secret file %s has mode %04o: it must be 0600 or 0400",
			path, (unsigned)(st.st_mode & 07777));
		rc = -EPERM;
		goto out;
	}
	while (len < sizeof(buf)) {
		n = read(fd, buf + len, sizeof(buf) - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = -errno;
			goto out;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	if (len > 0 && buf[len - 1] == '\n')
		len--;
	if (len < GRP_SECRET_MIN || len > GRP_SECRET_MAX) {
		rft_err("secret file %s holds %zu bytes: between %d and %d needed",
			path, len, GRP_SECRET_MIN, GRP_SECRET_MAX);
		rc = -EINVAL;
		goto out;
	}
	memcpy(out->key, buf, len);
	out->len = len;
out:
	OPENSSL_cleanse(buf, sizeof(buf));
	close(fd);
	return rc;
}

static EVP_MAC *hmac_alg;
static pthread_once_t hmac_once = PTHREAD_ONCE_INIT;

static void hmac_fetch(void)
{
	hmac_alg = EVP_MAC_fetch(NULL, "HMAC", NULL);
}

void grp_mac(const struct grp_secret *s, const struct grp_part *parts, int n,
	     uint8_t out[GRP_MAC_LEN])
{
	/*
	 * HMAC over the parts, each preceded by its length, so that no two
	 * different lists of parts give the same input.
	 */
	char digest[] = "SHA256";
	OSSL_PARAM params[] = {
		OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest,
						 0),
		OSSL_PARAM_construct_end(),
	};
	uint8_t lenbuf[8];
	size_t olen = 0;
	EVP_MAC_CTX *ctx = NULL;
	int i, ok;

	memset(out, 0, GRP_MAC_LEN);
	pthread_once(&hmac_once, hmac_fetch);
	if (hmac_alg)
		ctx = EVP_MAC_CTX_new(hmac_alg);
	if (!ctx)
		return; /* an all-zero MAC matches nothing (grp_mac_equal) */
	ok = EVP_MAC_init(ctx, s->key, s->len, params);
	for (i = 0; ok && i < n; i++) {
		uint64_t l = parts[i].len;
		int b;

		for (b = 0; b < 8; b++)
			lenbuf[b] = (uint8_t)(l >> (8 * b));
		ok = EVP_MAC_update(ctx, lenbuf, sizeof(lenbuf)) &&
		     EVP_MAC_update(ctx, parts[i].p, parts[i].len);
	}
	if (!ok || !EVP_MAC_final(ctx, out, &olen, GRP_MAC_LEN) ||
	    olen != GRP_MAC_LEN)
		memset(out, 0, GRP_MAC_LEN);
	EVP_MAC_CTX_free(ctx);
}

bool grp_mac_equal(const uint8_t a[GRP_MAC_LEN], const uint8_t b[GRP_MAC_LEN])
{
	static const uint8_t zero[GRP_MAC_LEN];

	/* A MAC that failed to compute is all zeros: never accept it. */
	if (CRYPTO_memcmp(a, zero, GRP_MAC_LEN) == 0)
		return false;
	return CRYPTO_memcmp(a, b, GRP_MAC_LEN) == 0;
}

int grp_random(void *buf, size_t len)
{
	uint8_t *p = buf;

	while (len > 0) {
		ssize_t n = getrandom(p, len, 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}
