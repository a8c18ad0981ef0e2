/*
 * round_trip.c: the 1-fragment round trip through the C API — post one 4 KiB
 * RDMA_WRITE on a 4-QP DQPLB virtual QP, poll until its completion — N times, over
 * softverbs in this process (soft0 -> soft1). Its Rust twin, round_trip_host.rs, runs
 * the same loop on vqp-host with the C API's capacities. Prints the ns per request, of
 * the clock and of this thread's CPU time (which leaves out time other processes ran).
 *
 * usage: round_trip N   (with VQP_IBVERBS_PATH naming softverbs' cdylib)
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vqp.h"

static void check(vqp_status st, const char *what) {
    if (st != VQP_OK) {
        char msg[256];
        vqp_last_error_message(msg, sizeof msg);
        fprintf(stderr, "round_trip: %s: %s (%s)\n", what, vqp_status_str(st), msg);
        exit(1);
    }
}

enum { LEN = 4096 };

/* A zeroed, page-aligned buffer: what vqp-host's register_buffer gives the Rust twin. */
static unsigned char *buffer(void) {
    void *p = NULL;
    if (posix_memalign(&p, 4096, LEN) != 0) {
        fprintf(stderr, "round_trip: out of memory\n");
        exit(1);
    }
    memset(p, 0, LEN);
    return p;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 10000;
    unsigned char *src = buffer(), *dst = buffer();
    vqp_device d0, d1;
    check(vqp_device_open(NULL, "soft0", &d0), "open");
    check(vqp_device_open(NULL, "soft1", &d1), "open");
    vqp_mr sm, dm;
    struct vqp_mr_info si, di;
    check(vqp_mr_register(d0, src, LEN, VQP_ACCESS_LOCAL_WRITE, &sm), "reg");
    check(vqp_mr_register(d1, dst, LEN, VQP_ACCESS_LOCAL_WRITE | VQP_ACCESS_REMOTE_WRITE,
                          &dm),
          "reg");
    check(vqp_mr_query(sm, &si), "query");
    check(vqp_mr_query(dm, &di), "query");
    struct vqp_settings s;
    check(vqp_settings_init(&s, sizeof s), "settings");
    s.data_qps = 4;
    vqp_endpoint a, b;
    check(vqp_endpoint_create(&d0, 1, &s, &a), "create");
    check(vqp_endpoint_create(&d1, 1, &s, &b), "create");
    uint8_t ca[VQP_CARD_MAX], cb[VQP_CARD_MAX];
    size_t la, lb;
    check(vqp_endpoint_card(a, ca, sizeof ca, &la), "card");
    check(vqp_endpoint_card(b, cb, sizeof cb, &lb), "card");
    check(vqp_endpoint_connect(a, cb, lb), "connect");
    check(vqp_endpoint_connect(b, ca, la), "connect");

    struct vqp_send_wr w = {.wr_id = 7, .opcode = VQP_WR_RDMA_WRITE, .flags = VQP_SEND_SIGNALED,
                            .local_addr = si.addr, .len = LEN, .remote_addr = di.addr,
                            .key_mask = 1};
    w.keys[0].lkey = si.lkey;
    w.keys[0].rkey = di.rkey;
    struct vqp_wc wc[32];
    struct timespec t0, t1, c0, c1;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < n; i++) {
        check(vqp_post_send(a, &w), "post");
        uint32_t got = 0;
        while (got == 0)
            check(vqp_poll(a, wc, 32, &got), "poll");
        if (wc[0].status != VQP_WC_SUCCESS) {
            fprintf(stderr, "round_trip: status %u\n", wc[0].status);
            return 1;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
    double ns = (double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec);
    double cpu = (double)(c1.tv_sec - c0.tv_sec) * 1e9 + (double)(c1.tv_nsec - c0.tv_nsec);
    printf("round_trip (C API): %ld requests, %.1f ns per request (%.1f ns of the thread's CPU "
           "time)\n",
           n, ns / (double)n, cpu / (double)n);
    check(vqp_endpoint_destroy(a), "destroy");
    check(vqp_endpoint_destroy(b), "destroy");
    check(vqp_mr_deregister(sm), "dereg");
    check(vqp_mr_deregister(dm), "dereg");
    check(vqp_device_close(d0), "close");
    check(vqp_device_close(d1), "close");
    free(src);
    free(dst);
    return 0;
}
