/*
 * DESIGN: connection authentication with a cluster secret. Owns the secret
 * file checks, nonces and HMAC-SHA256 proofs (OpenSSL: EVP_Q_mac, RAND_bytes,
 * CRYPTO_memcmp), and the client side of the handshake (HELLO, then AUTH),
 * which runs as transport calls on the worker's thread. Never: log a secret
 * or a proof, or compare proofs in variable time.
 */
#include "cks_tp.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>


cks_status_t cks_tp_secret_load(const char *path, cks_tp_secret_t *secret_p)
{
    cks_tp_secret_t s;
    struct stat st;
    ssize_t n;
    int fd;

    /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
     * writer, forever; it is refused below like any file that is not regular */
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        cks_error("secret file %s: %s", path, strerror(errno));
        return CKS_ERR_AUTH;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        cks_error("secret file %s is not a regular file", path);
        close(fd);
        return CKS_ERR_AUTH;
    }
    if (st.st_mode & 077) {
        cks_error("secret file %s can be read by others (mode %04o): chmod 600 it", path,
                  (unsigned)(st.st_mode & 07777));
        close(fd);
        return CKS_ERR_AUTH;
    }
    n = read(fd, s.key, sizeof(s.key));
    close(fd);
    if (n < 16 || (size_t)n >= sizeof(s.key)) {
        cks_error("secret file %s must hold 16 to %zu bytes", path, sizeof(s.key) - 1);
        return CKS_ERR_AUTH;
    }
    s.len     = (size_t)n;
    s.peer    = 0;
    s.job[0]  = '\0';
    *secret_p = s;
    return CKS_OK;
}

cks_status_t cks_tp_nonce(uint8_t nonce[CKS_WIRE_NONCE_LEN])
{
    return RAND_bytes(nonce, CKS_WIRE_NONCE_LEN) == 1 ? CKS_OK : CKS_ERR_INTERNAL;
}

uint64_t cks_tp_random_id(void)
{
    uint64_t id = 0;
    if (RAND_bytes((unsigned char *)&id, sizeof(id)) != 1) {
        /* OpenSSL's generator failed (it logs why): ids stay unique, only
         * less hard to guess */
        static _Atomic uint64_t fallback;
        id = cks_time_ns() ^ (++fallback << 40);
    }
    return id != 0 ? id : 1;
}

cks_status_t cks_tp_proof(const cks_tp_secret_t *secret, const char *label, const void *a,
                          size_t alen, const void *b, size_t blen,
                          uint8_t proof[CKS_WIRE_NONCE_LEN])
{
    uint8_t msg[64 + 2 * CKS_WIRE_NONCE_LEN];
    size_t llen = strlen(label), out = 0;

    if (llen > 64 || alen > CKS_WIRE_NONCE_LEN || blen > CKS_WIRE_NONCE_LEN) {
        return CKS_ERR_INVALID_PARAM;
    }
    memcpy(msg, label, llen);
    memcpy(msg + llen, a, alen);
    memcpy(msg + llen + alen, b, blen);
    if (EVP_Q_mac(NULL, "HMAC", NULL, "SHA256", NULL, secret->key, secret->len, msg,
                  llen + alen + blen, proof, CKS_WIRE_NONCE_LEN, &out) == NULL ||
        out != CKS_WIRE_NONCE_LEN) {
        cks_error("HMAC-SHA256 failed");
        return CKS_ERR_INTERNAL;
    }
    return CKS_OK;
}

cks_status_t cks_tp_proof_check(const cks_tp_secret_t *secret, const char *label,
                                const void *a, size_t alen, const void *b, size_t blen,
                                const cks_wire_str_t *proof)
{
    uint8_t want[CKS_WIRE_NONCE_LEN];
    if (proof->len != CKS_WIRE_NONCE_LEN ||
        cks_tp_proof(secret, label, a, alen, b, blen, want) != CKS_OK) {
        return CKS_ERR_AUTH;
    }
    return CRYPTO_memcmp(want, proof->ptr, CKS_WIRE_NONCE_LEN) == 0 ? CKS_OK : CKS_ERR_AUTH;
}
