/*
 * What the C programs that tests/c_api.rs runs share: the checks, which count into
 * `checks` and, on failure, name the program (TEST_NAME, a string the program defines
 * before including this), the line and the call, then exit 1; and the set-up of two
 * endpoints on softverbs' soft0 and soft1 with a region on each.
 */
#ifndef VQP_TESTS_C_COMMON_H
#define VQP_TESTS_C_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vqp.h"

#ifndef TEST_NAME
#error "define TEST_NAME, the program's name as a string, before including common.h"
#endif

static int checks;

/* `call` must return `want`; otherwise the program says what it got, with the
 * library's last error message, and exits 1. */
#define EXPECT(call, want)                                                                \
    do {                                                                                  \
        vqp_status got_ = (call);                                                         \
        checks++;                                                                         \
        if (got_ != (want)) {                                                             \
            char msg_[512];                                                               \
            vqp_last_error_message(msg_, sizeof msg_);                                    \
            fprintf(stderr, TEST_NAME ":%d: %s returned %s, expected %s (%s)\n", __LINE__, \
                    #call, vqp_status_str(got_), vqp_status_str(want), msg_);             \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

/* `cond` must hold; otherwise the program names it and exits 1. */
#define TRUE(cond)                                                                        \
    do {                                                                                  \
        checks++;                                                                         \
        if (!(cond)) {                                                                    \
            fprintf(stderr, TEST_NAME ":%d: %s is false\n", __LINE__, #cond);             \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

/* Seconds on the monotonic clock. */
static inline double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Endpoints `a` on `d0` and `b` on `d1`, one port each, with settings `s`. */
static inline void create_pair(vqp_device *d0, vqp_device *d1, const struct vqp_settings *s,
                               vqp_endpoint *a, vqp_endpoint *b) {
    EXPECT(vqp_endpoint_create(d0, 1, s, a), VQP_OK);
    EXPECT(vqp_endpoint_create(d1, 1, s, b), VQP_OK);
}

/* Connects created endpoints `a` and `b` to each other through their cards. */
static inline void connect_pair(vqp_endpoint a, vqp_endpoint b) {
    uint8_t ca[VQP_CARD_MAX], cb[VQP_CARD_MAX];
    size_t la, lb;
    EXPECT(vqp_endpoint_card(a, ca, sizeof ca, &la), VQP_OK);
    EXPECT(vqp_endpoint_card(b, cb, sizeof cb, &lb), VQP_OK);
    EXPECT(vqp_endpoint_connect(a, cb, lb), VQP_OK);
    EXPECT(vqp_endpoint_connect(b, ca, la), VQP_OK);
}

/* A source region on one device (local write) and a destination on another (local and
 * remote write), `len` bytes each, with what their queries say. */
struct regions {
    vqp_mr sm, dm;
    struct vqp_mr_info si, di;
};

static inline void regions_register(struct regions *r, vqp_device from, void *src,
                                    vqp_device to, void *dst, size_t len) {
    EXPECT(vqp_mr_register(from, src, len, VQP_ACCESS_LOCAL_WRITE, &r->sm), VQP_OK);
    EXPECT(vqp_mr_register(to, dst, len, VQP_ACCESS_LOCAL_WRITE | VQP_ACCESS_REMOTE_WRITE,
                           &r->dm),
           VQP_OK);
    EXPECT(vqp_mr_query(r->sm, &r->si), VQP_OK);
    EXPECT(vqp_mr_query(r->dm, &r->di), VQP_OK);
}

static inline void regions_deregister(struct regions *r) {
    EXPECT(vqp_mr_deregister(r->sm), VQP_OK);
    EXPECT(vqp_mr_deregister(r->dm), VQP_OK);
}

/* A signaled RDMA WRITE `id` of `len` bytes from region `from` to region `to`. */
static inline struct vqp_send_wr write_wr(uint64_t id, const struct vqp_mr_info *from,
                                          const struct vqp_mr_info *to, uint64_t len) {
    struct vqp_send_wr w = {.wr_id = id, .opcode = VQP_WR_RDMA_WRITE, .flags = VQP_SEND_SIGNALED,
                            .local_addr = from->addr, .len = len, .remote_addr = to->addr,
                            .key_mask = 1};
    w.keys[0].lkey = from->lkey;
    w.keys[0].rkey = to->rkey;
    return w;
}

/* Polls `ep` (and `other`, to keep its side moving) until wr_id completes, for at most
 * 20 s; returns its status. */
static inline uint32_t complete(vqp_endpoint ep, vqp_endpoint other, uint64_t wr_id) {
    struct vqp_wc wc[8];
    uint32_t n;
    double until = now() + 20.0;
    while (now() < until) {
        EXPECT(vqp_poll(ep, wc, 8, &n), VQP_OK);
        for (uint32_t k = 0; k < n; k++)
            if (wc[k].wr_id == wr_id)
                return wc[k].status;
        EXPECT(vqp_poll(other, wc, 8, &n), VQP_OK);
    }
    fprintf(stderr, TEST_NAME ": no completion for %llu within 20 s\n",
            (unsigned long long)wr_id);
    exit(1);
}

#endif
