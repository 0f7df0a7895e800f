/*
 * stall_client SERVER SECONDS: a client of the standalone server at SERVER
 * ("addr:port") that reads cks_client_stats() every 100 ms for at most
 * SECONDS and prints the largest receive_stalled_s it saw; exits 0 once it
 * saw 5 or more (the client's receive path counts as stalled), 1 when it
 * did not, 2 when the client could not be made. Run by
 * stall_exit/a_client_whose_receive_path_takes_nothing_says_so with
 * CKS_FAULTS=sentinel_lost:always, which the library reads when it loads
 * (a test process cannot arm the library's fault points itself), and
 * without it.
 */
#include "ckstore.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv)
{
    cks_client_params_t p = {0};
    cks_client_h c        = NULL;
    uint64_t most         = 0;
    if (argc != 3) {
        fprintf(stderr, "usage: stall_client SERVER SECONDS\n");
        return 2;
    }
    p.field_mask = CKS_CLIENT_FIELD_SERVER | CKS_CLIENT_FIELD_TIMEOUT_MS;
    p.server     = argv[1];
    p.timeout_ms = 10000;
    if (cks_client_create(&p, &c) != CKS_OK) {
        fprintf(stderr, "stall_client: no client of %s\n", argv[1]);
        return 2;
    }
    int tenths = atoi(argv[2]) * 10;
    for (int i = 0; i < tenths && most < 5; i++) {
        cks_client_stats_t st;
        struct timespec ts = {0, 100 * 1000000L};
        if (cks_client_stats(c, &st) == CKS_OK && st.receive_stalled_s > most) {
            most = st.receive_stalled_s;
        }
        nanosleep(&ts, NULL);
    }
    printf("receive_stalled_s %llu\n", (unsigned long long)most);
    cks_client_destroy(c);
    return most >= 5 ? 0 : 1;
}
