/*
 * sha256.h - SHA-256 through OpenSSL's EVP interface.
 *
 * EVP only: on OpenSSL 3 the low-level SHA256_* calls do not reach the
 * SHA-NI code path. The digest is fetched once per process and a hasher keeps
 * its context, so hashing many small chunks costs no allocation per chunk.
 * A hasher belongs to one thread at a time.
 */
#ifndef CREST_UTIL_SHA256_H
#define CREST_UTIL_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define SHA256_LEN 32
#define SHA256_HEX_LEN 64

struct sha256_hasher;

int sha256_hasher_new(struct sha256_hasher **out);
void sha256_hasher_free(struct sha256_hasher *h);
int sha256_hash(struct sha256_hasher *h, const void *data, size_t len, uint8_t out[SHA256_LEN]);

/* One-shot, for the rare caller without a hasher (manifest ids). */
int sha256_once(const void *data, size_t len, uint8_t out[SHA256_LEN]);

/* hex must hold 2*len+1 bytes. */
void hex_encode(const uint8_t *bin, size_t len, char *hex);
/* Returns the number of bytes decoded, or -EINVAL on a non-hex digit. */
int hex_decode(const char *hex, uint8_t *bin, size_t cap);

#endif
