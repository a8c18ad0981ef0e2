/*
 * The poll-thread mode through the C API: two endpoints in one process over
 * softverbs (soft0, soft1), each handed to a poll thread; the application submits
 * through its vqp_app handle and takes events from it. 200 RDMA_WRITE_WITH_IMM of
 * 64 KiB each land (every byte checked, every notification in order), a refused
 * request comes back as an event, the endpoints take no direct post once handed
 * over, soft1's link going down reaches the application as a VQP_EVENT_PATH_FAILED
 * (the poll thread watches the device's events), and stopping reports what the
 * threads did. Run by tests/c_api.rs.
 * Prints "poller: N checks passed" and exits 0.
 */
#define _GNU_SOURCE
#include <dlfcn.h>

#define TEST_NAME "poller"
#include "common.h"

#define MSG (64u << 10)
#define COUNT 200u
static unsigned char src[MSG * 4], dst[MSG * 4];

int main(void) {
    vqp_device d0, d1;
    EXPECT(vqp_device_open(NULL, "soft0", &d0), VQP_OK);
    EXPECT(vqp_device_open(NULL, "soft1", &d1), VQP_OK);
    struct regions regs;
    regions_register(&regs, d0, src, d1, dst, sizeof src);
    const struct vqp_mr_info si = regs.si, di = regs.di;

    struct vqp_settings s;
    EXPECT(vqp_settings_init(&s, sizeof s), VQP_OK);
    s.max_frag = 16384;
    vqp_endpoint a, b;
    create_pair(&d0, &d1, &s, &a, &b);

    struct vqp_poller_config pc;
    EXPECT(vqp_poller_config_init(&pc, sizeof pc - 4), VQP_ERR_STRUCT_SIZE);
    EXPECT(vqp_poller_config_init(&pc, sizeof pc), VQP_OK);
    pc.idle = VQP_IDLE_YIELD; /* a shared machine: yield when idle */
    pc.spins = 100;
    vqp_app app_a, app_b;
    /* Out of order: a poll thread takes a connected endpoint only. */
    EXPECT(vqp_endpoint_start_poller(a, &pc, &app_a), VQP_ERR_STATE);
    connect_pair(a, b);
    struct vqp_poller_config bad = pc;
    bad.idle = 9;
    EXPECT(vqp_endpoint_start_poller(a, &bad, &app_a), VQP_ERR_INVALID_ARGUMENT);
    EXPECT(vqp_endpoint_start_poller(a, &pc, &app_a), VQP_OK);
    EXPECT(vqp_endpoint_start_poller(b, &pc, &app_b), VQP_OK);
    /* Handed over: the endpoint takes no direct call. */
    struct vqp_recv_wr note = {.wr_id = 0};
    EXPECT(vqp_post_recv(a, &note), VQP_ERR_STATE);
    EXPECT(vqp_endpoint_start_poller(a, &pc, &app_a), VQP_ERR_STATE);

    for (size_t i = 0; i < sizeof src; i++)
        src[i] = (unsigned char)(i * 11 + 5);
    struct vqp_event ev[32];
    uint32_t n;
    uint64_t sent = 0, landed = 0, posted = 0, received = 0;
    int rejected = 0;
    /* One bad request first: refused on the poll thread, reported as an event. */
    struct vqp_send_wr badwr = {.wr_id = 999, .opcode = 77, .flags = VQP_SEND_SIGNALED,
                                .len = 1, .key_mask = 1};
    EXPECT(vqp_app_send(app_a, &badwr), VQP_OK);
    for (long spins = 0; (landed < COUNT || sent < COUNT || !rejected) && spins < 200000000;
         spins++) {
        if (received < COUNT && received - landed < 64) {
            struct vqp_recv_wr r = {.wr_id = received};
            vqp_status st = vqp_app_recv(app_b, &r);
            TRUE(st == VQP_OK || st == VQP_ERR_FULL);
            received += st == VQP_OK;
        }
        /* At most four writes in flight: each to its own quarter of the buffer. */
        if (posted < COUNT && posted < received && posted - sent < 4) {
            uint64_t q = posted % 4;
            struct vqp_send_wr w = {.wr_id = posted, .opcode = VQP_WR_RDMA_WRITE_WITH_IMM,
                                    .flags = VQP_SEND_SIGNALED, .local_addr = si.addr + q * MSG,
                                    .len = MSG, .remote_addr = di.addr + q * MSG,
                                    .key_mask = 1};
            w.keys[0].lkey = si.lkey;
            w.keys[0].rkey = di.rkey;
            vqp_status st = vqp_app_send(app_a, &w);
            TRUE(st == VQP_OK || st == VQP_ERR_FULL);
            posted += st == VQP_OK;
        }
        EXPECT(vqp_app_poll(app_a, ev, 32, &n), VQP_OK);
        for (uint32_t i = 0; i < n; i++) {
            if (ev[i].kind == VQP_EVENT_REJECTED) {
                TRUE(ev[i].wc.wr_id == 999 && ev[i].refusal == VQP_ERR_REQUEST);
                rejected = 1;
                continue;
            }
            TRUE(ev[i].kind == VQP_EVENT_COMPLETED && ev[i].wc.status == VQP_WC_SUCCESS);
            TRUE(ev[i].wc.wr_id == sent);
            sent++;
        }
        EXPECT(vqp_app_poll(app_b, ev, 32, &n), VQP_OK);
        for (uint32_t i = 0; i < n; i++) {
            TRUE(ev[i].kind == VQP_EVENT_COMPLETED && ev[i].wc.status == VQP_WC_SUCCESS);
            TRUE(ev[i].wc.wr_id == landed && ev[i].wc.byte_len == MSG);
            uint64_t q = landed % 4;
            if (memcmp(dst + q * MSG, src + q * MSG, MSG)) {
                fprintf(stderr, "poller: message %llu differs\n", (unsigned long long)landed);
                return 1;
            }
            landed++;
        }
    }
    TRUE(sent == COUNT && landed == COUNT && rejected);

    /* soft1's link goes down (softverbs' fault injection, in the library this process
     * loaded): b's poll thread sees the port event and reports it. */
    const char *lib = getenv("VQP_IBVERBS_PATH");
    void *h = lib ? dlopen(lib, RTLD_NOW | RTLD_NOLOAD) : NULL;
    int (*set_link)(uint32_t, int) = h ? (int (*)(uint32_t, int))dlsym(h, "vqp_soft_set_link") : NULL;
    TRUE(set_link != NULL);
    TRUE(set_link(1, 0) == 0);
    int path_failed = 0;
    for (long spins = 0; !path_failed && spins < 20000000; spins++) {
        EXPECT(vqp_app_poll(app_b, ev, 32, &n), VQP_OK);
        for (uint32_t i = 0; i < n; i++)
            if (ev[i].kind == VQP_EVENT_PATH_FAILED) {
                TRUE(ev[i].path.kind == 10 && ev[i].path.subject == VQP_EVENT_SUBJECT_PORT);
                path_failed = 1;
            }
    }
    TRUE(path_failed);
    TRUE(set_link(1, 1) == 0);
    dlclose(h);

    struct vqp_poller_stats st;
    EXPECT(vqp_app_stop(app_a, 5000, 0, &st), VQP_OK);
    TRUE(st.submitted >= COUNT && st.rejected == 1 && st.aborted == 0 && st.outstanding == 0);
    EXPECT(vqp_app_stop(app_b, 5000, 1, NULL), VQP_OK);
    EXPECT(vqp_app_send(app_a, &badwr), VQP_ERR_STALE_HANDLE);
    EXPECT(vqp_app_poll(app_b, ev, 32, &n), VQP_ERR_STALE_HANDLE);
    EXPECT(vqp_app_stop(app_a, 0, 0, NULL), VQP_ERR_STALE_HANDLE);

    EXPECT(vqp_endpoint_destroy(a), VQP_OK);
    EXPECT(vqp_endpoint_destroy(b), VQP_OK);
    regions_deregister(&regs);
    EXPECT(vqp_device_close(d0), VQP_OK);
    EXPECT(vqp_device_close(d1), VQP_OK);
    printf("poller: %d checks passed\n", checks);
    return 0;
}
