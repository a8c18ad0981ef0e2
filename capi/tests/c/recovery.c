/*
 * Failures and recovery through the C API, two endpoints in one process over
 * softverbs (soft0, soft1): an asynchronous event applied to an endpoint fails its
 * QP; with re-dispatch the virtual QP goes on over the others and its traffic still
 * lands; fail-back replaces the failed QP through 8-byte messages carried by hand;
 * without re-dispatch the same event fails the virtual QP; a link taken down through
 * softverbs' fault injection arrives as a real port event, read from the device and
 * applied. Run by tests/c_api.rs.
 * Prints "recovery: N checks passed" and exits 0.
 */
#define _GNU_SOURCE
#include <dlfcn.h>

#define TEST_NAME "recovery"
#include "common.h"

static vqp_device d0, d1;
static unsigned char src[1 << 18], dst[1 << 18];

/* Two endpoints connected to each other, 4 data QPs each. */
static void pair(struct vqp_settings *s, vqp_endpoint *a, vqp_endpoint *b) {
    create_pair(&d0, &d1, s, a, b);
    connect_pair(*a, *b);
}

int main(void) {
    EXPECT(vqp_device_open(NULL, "soft0", &d0), VQP_OK);
    EXPECT(vqp_device_open(NULL, "soft1", &d1), VQP_OK);
    struct regions regs;
    regions_register(&regs, d0, src, d1, dst, sizeof src);
    const struct vqp_mr_info si = regs.si, di = regs.di;

    /* No event waits on a quiet device. */
    struct vqp_async_event ev;
    int got = -1, fd = -1, failed = -1;
    EXPECT(vqp_device_async_fd(d0, &fd), VQP_OK);
    TRUE(fd >= 0);
    EXPECT(vqp_device_next_event(d0, 0, &ev, &got), VQP_OK);
    TRUE(got == 0);

    struct vqp_settings s;
    EXPECT(vqp_settings_init(&s, sizeof s), VQP_OK);
    s.max_frag = 16384; /* 16 fragments per write: every data QP carries some */
    s.redispatch = 1;
    s.fail_back = 1;
    vqp_endpoint a, b;
    pair(&s, &a, &b);

    struct vqp_qp_stats st;
    EXPECT(vqp_endpoint_qp_stats(a, 1, &st), VQP_OK);
    /* An event about no QP of this endpoint changes nothing. */
    struct vqp_async_event fatal = {.kind = 1 /* IBV_EVENT_QP_FATAL */,
                                    .subject = VQP_EVENT_SUBJECT_QP, .qp_num = 0xabcdef};
    EXPECT(vqp_endpoint_apply_event(a, 0, &fatal, &failed), VQP_OK);
    TRUE(failed == 0);
    fatal.subject = 9;
    EXPECT(vqp_endpoint_apply_event(a, 0, &fatal, &failed), VQP_ERR_INVALID_ARGUMENT);
    EXPECT(vqp_endpoint_apply_event(a, 7, &fatal, &failed), VQP_ERR_INVALID_ARGUMENT);
    /* QP 1 fatal: with re-dispatch the virtual QP runs on three. */
    fatal.subject = VQP_EVENT_SUBJECT_QP;
    fatal.qp_num = st.qp_num;
    EXPECT(vqp_endpoint_apply_event(a, 0, &fatal, &failed), VQP_OK);
    TRUE(failed == 1);
    EXPECT(vqp_endpoint_qp_stats(a, 1, &st), VQP_OK);
    TRUE(st.failed == 1);
    struct vqp_failover f;
    EXPECT(vqp_endpoint_failover(a, &f), VQP_OK);
    TRUE(f.failovers == 1 && f.healthy == 3 && f.failed_status == 0);

    for (size_t i = 0; i < sizeof src; i++)
        src[i] = (unsigned char)(i * 31 + 1);
    struct vqp_send_wr w = write_wr(10, &si, &di, sizeof src);
    EXPECT(vqp_post_send(a, &w), VQP_OK);
    TRUE(complete(a, b, 10) == VQP_WC_SUCCESS);
    TRUE(memcmp(src, dst, sizeof src) == 0);

    /* Fail-back: a fresh QP 1, the messages carried by hand until both sides settle. */
    uint8_t msg[VQP_FAILBACK_LEN], reply[VQP_FAILBACK_LEN];
    int has = 0;
    EXPECT(vqp_endpoint_on_failback(b, (const uint8_t *)"garbage!", reply, &has), VQP_ERR_PEER);
    EXPECT(vqp_endpoint_offer_rejoin(a, 1, msg), VQP_OK);
    vqp_endpoint from = b, to = a;
    memcpy(reply, msg, sizeof msg);
    int hops = 0;
    do {
        memcpy(msg, reply, sizeof msg);
        EXPECT(vqp_endpoint_on_failback(from, msg, reply, &has), VQP_OK);
        vqp_endpoint t = from;
        from = to;
        to = t;
        hops++;
    } while (has && hops < 8);
    TRUE(!has);
    EXPECT(vqp_endpoint_failover(a, &f), VQP_OK);
    TRUE(f.restored == 1 && f.healthy == 4);
    memset(dst, 0, sizeof dst);
    w.wr_id = 11;
    EXPECT(vqp_post_send(a, &w), VQP_OK);
    TRUE(complete(a, b, 11) == VQP_WC_SUCCESS);
    TRUE(memcmp(src, dst, sizeof src) == 0);
    EXPECT(vqp_endpoint_qp_stats(a, 1, &st), VQP_OK);
    TRUE(st.failed == 0);

    /* The clock: no grace period running, nothing expires. */
    int expired = -1;
    EXPECT(vqp_endpoint_sample(a, 1000, &expired), VQP_OK);
    TRUE(expired == 0);
    EXPECT(vqp_endpoint_destroy(a), VQP_OK);
    EXPECT(vqp_endpoint_destroy(b), VQP_OK);

    /* Without re-dispatch, a port error fails the whole virtual QP. */
    s.redispatch = 0;
    s.fail_back = 0;
    pair(&s, &a, &b);
    struct vqp_async_event port = {.kind = 10 /* IBV_EVENT_PORT_ERR */,
                                   .subject = VQP_EVENT_SUBJECT_PORT, .port = 1};
    EXPECT(vqp_endpoint_apply_event(a, 0, &port, &failed), VQP_OK);
    TRUE(failed == 1);
    EXPECT(vqp_endpoint_failover(a, &f), VQP_OK);
    TRUE(f.failed_status != 0);
    w.wr_id = 12;
    EXPECT(vqp_post_send(a, &w), VQP_ERR_FAILED);
    EXPECT(vqp_endpoint_offer_rejoin(a, 1, msg), VQP_ERR_CONFIG);

    EXPECT(vqp_endpoint_destroy(a), VQP_OK);
    EXPECT(vqp_endpoint_destroy(b), VQP_OK);

    /* A real event: soft0's link goes down (softverbs' fault injection, in the library
     * this process loaded); the device reports IBV_EVENT_PORT_ERR, which fails every
     * QP of the endpoint on it. */
    pair(&s, &a, &b);
    const char *lib = getenv("VQP_IBVERBS_PATH");
    void *h = lib ? dlopen(lib, RTLD_NOW | RTLD_NOLOAD) : NULL;
    int (*set_link)(uint32_t, int) = h ? (int (*)(uint32_t, int))dlsym(h, "vqp_soft_set_link") : NULL;
    TRUE(set_link != NULL);
    TRUE(set_link(0, 0) == 0);
    int port_err = 0;
    for (int i = 0; i < 50 && !port_err; i++) {
        EXPECT(vqp_device_next_event(d0, 100, &ev, &got), VQP_OK);
        port_err = got && ev.kind == 10 && ev.subject == VQP_EVENT_SUBJECT_PORT && ev.port == 1;
    }
    TRUE(port_err);
    EXPECT(vqp_endpoint_apply_event(a, 0, &ev, &failed), VQP_OK);
    TRUE(failed == 1);
    EXPECT(vqp_endpoint_failover(a, &f), VQP_OK);
    TRUE(f.failed_status != 0);
    TRUE(set_link(0, 1) == 0);
    dlclose(h);
    EXPECT(vqp_endpoint_destroy(a), VQP_OK);
    EXPECT(vqp_endpoint_destroy(b), VQP_OK);
    regions_deregister(&regs);
    EXPECT(vqp_device_close(d0), VQP_OK);
    EXPECT(vqp_device_close(d1), VQP_OK);
    printf("recovery: %d checks passed\n", checks);
    return 0;
}
