/* sha256.c - SHA-256 through EVP; see sha256.h. */
#include "util/sha256.h"
#include "util/err.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <openssl/evp.h>

struct sha256_hasher {
	EVP_MD_CTX *ctx;
};

static const EVP_MD *sha_md;
static pthread_once_t sha_once = PTHREAD_ONCE_INIT;

static void sha_fetch(void)
{
	/* An explicit fetch: the implicit one inside EVP_sha256() is repeated on
	 * every EVP_DigestInit_ex and costs a lock and a lookup per chunk. */
	sha_md = EVP_MD_fetch(NULL, "SHA256", NULL);
}

int sha256_hasher_new(struct sha256_hasher **out)
{
	pthread_once(&sha_once, sha_fetch);
	if (!sha_md)
		return crest_errx(-ENOSYS, "OpenSSL has no SHA256 digest");
	struct sha256_hasher *h = calloc(1, sizeof(*h));
	if (!h)
		return crest_errf(-ENOMEM, "allocating a SHA-256 context");
	h->ctx = EVP_MD_CTX_new();
	if (!h->ctx) {
		free(h);
		return crest_errf(-ENOMEM, "allocating a SHA-256 context");
	}
	*out = h;
	return 0;
}

void sha256_hasher_free(struct sha256_hasher *h)
{
	if (!h)
		return;
	EVP_MD_CTX_free(h->ctx);
	free(h);
}

int sha256_hash(struct sha256_hasher *h, const void *data, size_t len, uint8_t out[SHA256_LEN])
{
	unsigned int n = 0;
	if (EVP_DigestInit_ex(h->ctx, sha_md, NULL) != 1 ||
	    EVP_DigestUpdate(h->ctx, data, len) != 1 ||
	    EVP_DigestFinal_ex(h->ctx, out, &n) != 1 || n != SHA256_LEN)
		return crest_errx(-EIO, "SHA-256 failed inside OpenSSL");
	return 0;
}

int sha256_once(const void *data, size_t len, uint8_t out[SHA256_LEN])
{
	struct sha256_hasher *h;
	int rc = sha256_hasher_new(&h);
	if (rc < 0)
		return rc;
	rc = sha256_hash(h, data, len, out);
	sha256_hasher_free(h);
	return rc;
}

void hex_encode(const uint8_t *bin, size_t len, char *hex)
{
	static const char digits[] = "0123456789abcdef";
	for (size_t i = 0; i < len; i++) {
		hex[2 * i] = digits[bin[i] >> 4];
		hex[2 * i + 1] = digits[bin[i] & 15];
	}
	hex[2 * len] = 0;
}

static int hex_nibble(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int hex_decode(const char *hex, uint8_t *bin, size_t cap)
{
	size_t n = 0;
	for (; hex[0] && hex[1]; hex += 2) {
		int hi = hex_nibble(hex[0]), lo = hex_nibble(hex[1]);
		if (hi < 0 || lo < 0 || n >= cap)
			return -EINVAL;
		bin[n++] = (uint8_t)(hi << 4 | lo);
	}
	if (hex[0])
		return -EINVAL;
	return (int)n;
}
