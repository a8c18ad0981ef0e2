/*
 * Connecting through the RDMA connection manager from C: two endpoints of one process
 * over softverbs (soft0 dials, soft1 serves on a thread of its own), connected with
 * vqp_endpoint_cm_serve / vqp_endpoint_cm_dial through vqp-rdmacm. In both modes the
 * client dials at once (before the server may listen: it asks again until it does),
 * every data QP carries a write each way and the bytes are checked; a pair connected
 * so works once handed to poll threads. Then the refusals
 * and deadlines: a card the server does not agree with is refused on both sides with
 * the same reason and leaves both endpoints usable; a server nobody dials times out;
 * a client nobody listens to gives up at its timeout; an address no RDMA device has is
 * an error within its timeout. Run by tests/c_api.rs plainly, under AddressSanitizer
 * and under valgrind, with VQP_IBVERBS_PATH, VQP_RDMACM_PATH and VQP_SOFT_DIR set.
 * Prints "cm: N checks passed" and exits 0, or names the first check that failed.
 */
#define _GNU_SOURCE
#include <pthread.h>

#define TEST_NAME "cm"
#include "common.h"

#define LEN (1u << 18)

static vqp_device d0, d1;
static unsigned char src[LEN], dst[LEN], back[LEN];

/* One vqp_endpoint_cm_serve on a thread: its status, message and duration. */
struct serving {
    pthread_t thread;
    vqp_endpoint ep;
    char addr[64];
    uint32_t timeout_ms;
    vqp_status st;
    char msg[512];
    double took;
};

static void *serve_main(void *p) {
    struct serving *s = p;
    double t0 = now();
    s->st = vqp_endpoint_cm_serve(s->ep, s->addr, s->timeout_ms);
    s->took = now() - t0;
    s->msg[0] = 0;
    if (s->st != VQP_OK)
        vqp_last_error_message(s->msg, sizeof s->msg);
    return NULL;
}

static void serve(struct serving *s, vqp_endpoint ep, const char *addr, uint32_t timeout_ms) {
    memset(s, 0, sizeof *s);
    s->ep = ep;
    snprintf(s->addr, sizeof s->addr, "%s", addr);
    s->timeout_ms = timeout_ms;
    TRUE(pthread_create(&s->thread, NULL, serve_main, s) == 0);
}

static void served(struct serving *s) { TRUE(pthread_join(s->thread, NULL) == 0); }

/* Whether `ep` is still in its created state (its card is made only then). */
static int created(vqp_endpoint ep) {
    uint8_t card[VQP_CARD_MAX];
    size_t len = 0;
    return vqp_endpoint_card(ep, card, sizeof card, &len) == VQP_OK;
}

/* Both sides through the CM, then a write each way over every data QP, checked. */
static void connect_and_move(uint32_t mode, const char *addr) {
    struct vqp_settings s;
    EXPECT(vqp_settings_init(&s, sizeof s), VQP_OK);
    s.mode = mode;
    s.data_qps = 4;
    vqp_endpoint a, b;
    create_pair(&d0, &d1, &s, &a, &b);
    struct serving srv;
    serve(&srv, b, addr, 20000);
    /* At once: the server may not listen yet, and the client asks again until it does. */
    EXPECT(vqp_endpoint_cm_dial(a, addr, 20000), VQP_OK);
    served(&srv);
    EXPECT(srv.st, VQP_OK);
    /* Connected: neither takes a second set-up. */
    EXPECT(vqp_endpoint_cm_dial(a, addr, 100), VQP_ERR_STATE);
    EXPECT(vqp_endpoint_cm_serve(b, addr, 100), VQP_ERR_STATE);

    vqp_mr ms, md, mb;
    struct vqp_mr_info is, id, ib;
    uint32_t rw = VQP_ACCESS_LOCAL_WRITE | VQP_ACCESS_REMOTE_WRITE;
    EXPECT(vqp_mr_register(d0, src, LEN, VQP_ACCESS_LOCAL_WRITE, &ms), VQP_OK);
    EXPECT(vqp_mr_register(d1, dst, LEN, rw, &md), VQP_OK);
    EXPECT(vqp_mr_register(d0, back, LEN, rw, &mb), VQP_OK);
    EXPECT(vqp_mr_query(ms, &is), VQP_OK);
    EXPECT(vqp_mr_query(md, &id), VQP_OK);
    EXPECT(vqp_mr_query(mb, &ib), VQP_OK);
    for (size_t i = 0; i < LEN; i++)
        src[i] = (unsigned char)(i * 11 + mode);
    memset(dst, 0, LEN);
    memset(back, 0, LEN);

    /* Client to server, then the server writes what it got back to the client. */
    struct vqp_send_wr w = write_wr(1, &is, &id, LEN);
    EXPECT(vqp_post_send(a, &w), VQP_OK);
    TRUE(complete(a, b, 1) == VQP_WC_SUCCESS);
    TRUE(memcmp(src, dst, LEN) == 0);
    struct vqp_send_wr r = write_wr(2, &id, &ib, LEN);
    EXPECT(vqp_post_send(b, &r), VQP_OK);
    TRUE(complete(b, a, 2) == VQP_WC_SUCCESS);
    TRUE(memcmp(src, back, LEN) == 0);
    /* 256 KiB in 64 KiB fragments: every data QP the CM brought up carried one. */
    for (uint32_t q = 0; q < s.data_qps; q++) {
        struct vqp_qp_stats st;
        EXPECT(vqp_endpoint_qp_stats(a, q, &st), VQP_OK);
        TRUE(st.wqes > 0 && st.failed == 0);
        EXPECT(vqp_endpoint_qp_stats(b, q, &st), VQP_OK);
        TRUE(st.wqes > 0 && st.failed == 0);
    }

    EXPECT(vqp_endpoint_destroy(a), VQP_OK);
    EXPECT(vqp_endpoint_destroy(b), VQP_OK);
    EXPECT(vqp_mr_deregister(ms), VQP_OK);
    EXPECT(vqp_mr_deregister(md), VQP_OK);
    EXPECT(vqp_mr_deregister(mb), VQP_OK);
}

/* A pair connected through the CM handed to poll threads (the app handles keep the CM
 * connections): a write through vqp_app_send lands, checked. */
static void poll_threads(const char *addr) {
    struct vqp_settings s;
    EXPECT(vqp_settings_init(&s, sizeof s), VQP_OK);
    vqp_endpoint a, b;
    create_pair(&d0, &d1, &s, &a, &b);
    struct serving srv;
    serve(&srv, b, addr, 20000);
    EXPECT(vqp_endpoint_cm_dial(a, addr, 20000), VQP_OK);
    served(&srv);
    EXPECT(srv.st, VQP_OK);
    struct vqp_poller_config pc;
    EXPECT(vqp_poller_config_init(&pc, sizeof pc), VQP_OK);
    pc.idle = VQP_IDLE_YIELD; /* a shared machine: yield when idle */
    pc.spins = 100;
    vqp_app app_a, app_b;
    EXPECT(vqp_endpoint_start_poller(a, &pc, &app_a), VQP_OK);
    EXPECT(vqp_endpoint_start_poller(b, &pc, &app_b), VQP_OK);

    struct regions m;
    regions_register(&m, d0, src, d1, dst, LEN);
    for (size_t i = 0; i < LEN; i++)
        src[i] = (unsigned char)(i * 3 + 1);
    memset(dst, 0, LEN);
    struct vqp_send_wr w = write_wr(7, &m.si, &m.di, LEN);
    EXPECT(vqp_app_send(app_a, &w), VQP_OK);
    struct vqp_event ev[8];
    uint32_t n;
    int done = 0;
    double until = now() + 20.0;
    while (!done && now() < until) {
        EXPECT(vqp_app_poll(app_a, ev, 8, &n), VQP_OK);
        for (uint32_t k = 0; k < n; k++) {
            TRUE(ev[k].kind == VQP_EVENT_COMPLETED && ev[k].wc.wr_id == 7);
            TRUE(ev[k].wc.status == VQP_WC_SUCCESS);
            done = 1;
        }
        EXPECT(vqp_app_poll(app_b, ev, 8, &n), VQP_OK);
    }
    TRUE(done);
    TRUE(memcmp(src, dst, LEN) == 0);
    EXPECT(vqp_app_stop(app_a, 5000, 0, NULL), VQP_OK);
    EXPECT(vqp_app_stop(app_b, 5000, 0, NULL), VQP_OK);
    EXPECT(vqp_endpoint_destroy(a), VQP_OK);
    EXPECT(vqp_endpoint_destroy(b), VQP_OK);
    regions_deregister(&m);
}

/* Settings that differ (2 and 3 data QPs): refused on both sides with one reason. */
static void refused(const char *addr) {
    struct vqp_settings s2, s3;
    EXPECT(vqp_settings_init(&s2, sizeof s2), VQP_OK);
    s2.data_qps = 2;
    s3 = s2;
    s3.data_qps = 3;
    vqp_endpoint a, b;
    EXPECT(vqp_endpoint_create(&d0, 1, &s2, &a), VQP_OK);
    EXPECT(vqp_endpoint_create(&d1, 1, &s3, &b), VQP_OK);
    struct serving srv;
    serve(&srv, b, addr, 20000);
    EXPECT(vqp_endpoint_cm_dial(a, addr, 20000), VQP_ERR_PEER);
    char client_msg[512];
    vqp_last_error_message(client_msg, sizeof client_msg);
    served(&srv);
    EXPECT(srv.st, VQP_ERR_CARD);
    /* The server's message is "endpoint card: REASON"; the client's quotes REASON. */
    const char *prefix = "endpoint card: ";
    TRUE(strncmp(srv.msg, prefix, strlen(prefix)) == 0);
    const char *reason = srv.msg + strlen(prefix);
    TRUE(strlen(reason) > 0);
    if (!strstr(client_msg, reason)) {
        fprintf(stderr, "cm: the client's message (%s) lacks the server's reason (%s)\n",
                client_msg, reason);
        exit(1);
    }
    /* A refused card leaves both endpoints as they were. */
    TRUE(created(a) && created(b));
    EXPECT(vqp_endpoint_destroy(a), VQP_OK);
    EXPECT(vqp_endpoint_destroy(b), VQP_OK);
}

/* The deadlines: each call returns its error within its timeout (and a margin for a
 * slow run), not before it. */
static void deadlines(const char *addr, const char *unreachable) {
    struct vqp_settings s;
    EXPECT(vqp_settings_init(&s, sizeof s), VQP_OK);
    vqp_endpoint a, b;
    create_pair(&d0, &d1, &s, &a, &b);

    /* A server nobody dials. */
    struct serving srv;
    serve(&srv, b, addr, 400);
    served(&srv);
    EXPECT(srv.st, VQP_ERR_TIMEOUT);
    TRUE(srv.took >= 0.39 && srv.took < 10.0);
    TRUE(created(b));

    /* A client nobody listens to: asked again until its timeout, then the refusal. */
    char msg[512];
    double t0 = now();
    EXPECT(vqp_endpoint_cm_dial(a, addr, 400), VQP_ERR_PEER);
    double took = now() - t0;
    vqp_last_error_message(msg, sizeof msg);
    TRUE(took >= 0.3 && took < 10.0);
    checks++;
    if (!strstr(msg, "nobody listened")) {
        fprintf(stderr, "cm: dialling nobody: %s\n", msg);
        exit(1);
    }
    TRUE(created(a));

    /* An address of no interface here: no RDMA device answers for it. */
    t0 = now();
    vqp_status st = vqp_endpoint_cm_dial(a, unreachable, 400);
    took = now() - t0;
    vqp_last_error_message(msg, sizeof msg);
    checks++;
    if (st != VQP_ERR_PEER && st != VQP_ERR_TIMEOUT) {
        fprintf(stderr, "cm: dialling %s returned %s (%s)\n", unreachable, vqp_status_str(st),
                msg);
        exit(1);
    }
    TRUE(took < 10.0);
    TRUE(created(a));
    printf("cm: %s: %s after %.0f ms (%s)\n", unreachable, vqp_status_str(st), took * 1e3, msg);

    EXPECT(vqp_endpoint_destroy(a), VQP_OK);
    EXPECT(vqp_endpoint_destroy(b), VQP_OK);
}

int main(int argc, char **argv) {
    /* The ports are this run's own: vqp-rdmacm keeps its listeners in VQP_SOFT_DIR. */
    int port = argc > 1 ? atoi(argv[1]) : 18600;
    char addr[5][64];
    for (int i = 0; i < 5; i++)
        snprintf(addr[i], sizeof addr[i], "127.0.0.1:%d", port + i);
    char unreachable[64];
    /* TEST-NET-1 (RFC 5737): no interface of this machine has it. */
    snprintf(unreachable, sizeof unreachable, "192.0.2.1:%d", port);

    EXPECT(vqp_device_open(NULL, "soft0", &d0), VQP_OK);
    EXPECT(vqp_device_open(NULL, "soft1", &d1), VQP_OK);
    connect_and_move(VQP_MODE_DQPLB, addr[0]);
    connect_and_move(VQP_MODE_SPRAY, addr[1]);
    refused(addr[2]);
    deadlines(addr[3], unreachable);
    poll_threads(addr[4]);
    EXPECT(vqp_device_close(d0), VQP_OK);
    EXPECT(vqp_device_close(d1), VQP_OK);
    printf("cm: %d checks passed\n", checks);
    return 0;
}
