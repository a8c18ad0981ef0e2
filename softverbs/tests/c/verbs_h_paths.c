/*
 * A libibverbs program built against the system's <infiniband/verbs.h>, run by
 * tests/verbs_h.rs with softverbs' cdylib in place of libibverbs. It goes through the
 * header's inline paths (the extended verbs behind verbs_context, which softverbs' contexts
 * do not carry, the ops table of the data path) and the exported verbs softverbs answers
 * with "not supported", and checks what each returns.
 *
 * Prints one line per check, "ok NAME" or "FAIL NAME: what"; exits 0 when all pass.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

static int failures;

#define CHECK(name, cond, ...)                                   \
	do {                                                     \
		if (cond) {                                      \
			printf("ok %s\n", name);                 \
		} else {                                         \
			printf("FAIL %s: ", name);               \
			printf(__VA_ARGS__);                     \
			printf("\n");                            \
			failures++;                              \
		}                                                \
	} while (0)

struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	char buf[4096];
	uint16_t lid;
};

static struct ibv_qp *make_qp(struct side *s)
{
	struct ibv_qp_init_attr_ex a = {
		.send_cq = s->cq,
		.recv_cq = s->cq,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8,
			 .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
		.comp_mask = IBV_QP_INIT_ATTR_PD,
		.pd = s->pd,
	};
	/* comp_mask == PD only: the header falls back to ibv_create_qp. */
	return ibv_create_qp_ex(s->ctx, &a);
}

static int to_rts(struct side *s, struct side *peer)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_REMOTE_WRITE };
	if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			  IBV_QP_ACCESS_FLAGS))
		return 1;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_4096;
	a.dest_qp_num = peer->qp->qp_num;
	a.ah_attr.dlid = peer->lid;
	a.ah_attr.port_num = 1;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 1;
	if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
			  IBV_QP_MIN_RNR_TIMER))
		return 2;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		return 3;
	return 0;
}

static int open_side(struct ibv_device *dev, struct side *s)
{
	struct ibv_port_attr port;

	s->ctx = ibv_open_device(dev);
	if (!s->ctx)
		return 1;
	s->pd = ibv_alloc_pd(s->ctx);
	s->cq = ibv_create_cq(s->ctx, 16, NULL, NULL, 0);
	/* An optional access flag: the header routes this to ibv_reg_mr_iova2. */
	s->mr = ibv_reg_mr(s->pd, s->buf, sizeof s->buf,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			   IBV_ACCESS_RELAXED_ORDERING);
	if (!s->pd || !s->cq || !s->mr || ibv_query_port(s->ctx, 1, &port))
		return 2;
	s->lid = port.lid;
	s->qp = make_qp(s);
	return s->qp ? 0 : 3;
}

int main(void)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	struct side a = { 0 }, b = { 0 };

	CHECK("device_list", list && n >= 2 && !strcmp(ibv_get_device_name(list[0]), "soft0"),
	      "%d devices", n);
	if (!list || n < 2)
		return 1;
	CHECK("device_index", ibv_get_device_index(list[1]) == 1, "%d",
	      ibv_get_device_index(list[1]));
	CHECK("open_side_a", open_side(list[0], &a) == 0, "%d", errno);
	CHECK("open_side_b", open_side(list[1], &b) == 0, "%d", errno);
	if (!a.qp || !b.qp)
		return 1;

	{
		struct ibv_device_attr_ex dx;
		int rc = ibv_query_device_ex(a.ctx, NULL, &dx);
		CHECK("query_device_ex_falls_back", rc == 0 && dx.orig_attr.phys_port_cnt == 1 &&
		      dx.device_cap_flags_ex == 0, "rc %d", rc);
	}
	{
		struct ibv_port_attr p;
		int rc = ibv_query_port(b.ctx, 1, &p);
		CHECK("query_port", rc == 0 && p.state == IBV_PORT_ACTIVE && p.lid == 2 &&
		      p.link_layer == IBV_LINK_LAYER_INFINIBAND, "rc %d", rc);
	}
	{
		struct ibv_gid_entry e, t[4];
		int rc = ibv_query_gid_ex(a.ctx, 1, 0, &e, 0);
		ssize_t k = ibv_query_gid_table(b.ctx, t, 4, 0);
		CHECK("query_gid_ex", rc == 0 && e.gid_type == IBV_GID_TYPE_IB &&
		      e.gid.raw[0] == 0xfe, "rc %d type %u", rc, e.gid_type);
		CHECK("query_gid_table", k == 1 && t[0].gid.raw[15] == 1, "%zd", k);
		CHECK("gid_ex_bad_index", ibv_query_gid_ex(a.ctx, 1, 3, &e, 0) == EINVAL, "-");
	}
	{
		uint16_t idx_key = htobe16(0xffff);
		CHECK("pkey_index", ibv_get_pkey_index(a.ctx, 1, idx_key) == 0, "-");
	}
	{
		struct ibv_cq_init_attr_ex cx = { .cqe = 8 };
		errno = 0;
		CHECK("create_cq_ex_unsupported", !ibv_create_cq_ex(a.ctx, &cx) && errno == EOPNOTSUPP,
		      "errno %d", errno);
	}
	{
		struct ibv_qp_init_attr_ex qx = {
			.send_cq = a.cq, .recv_cq = a.cq, .qp_type = IBV_QPT_RC, .pd = a.pd,
			.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1,
				 .max_recv_sge = 1 },
			.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
			.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE,
		};
		errno = 0;
		CHECK("create_qp_ex_send_ops_unsupported", !ibv_create_qp_ex(a.ctx, &qx) &&
		      errno == EOPNOTSUPP, "errno %d", errno);
		CHECK("qp_to_qp_ex_null", ibv_qp_to_qp_ex(a.qp) == NULL, "-");
	}
	{
		struct ibv_srq_init_attr sa = { .attr = { .max_wr = 4, .max_sge = 1 } };
		struct ibv_ah_attr ah = { .dlid = 1, .port_num = 1 };
		struct ibv_xrcd_init_attr xa = { 0 };
		struct ibv_alloc_dm_attr dm = { .length = 64 };
		struct ibv_td_init_attr td = { 0 };
		struct ibv_ece ece;
		struct ibv_values_ex rt = { .comp_mask = IBV_VALUES_MASK_RAW_CLOCK };
		struct ibv_srq *srq = ibv_create_srq(a.pd, &sa);
		CHECK("create_srq", srq && sa.attr.max_wr == 4 && sa.attr.max_sge == 1, "%d", errno);
		if (srq) {
			struct ibv_recv_wr rw = { .wr_id = 1 }, *bad = NULL;
			struct ibv_srq_init_attr_ex sx = {
				.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD,
				.srq_type = IBV_SRQT_XRC,
				.pd = a.pd,
				.attr = { .max_wr = 4, .max_sge = 1 },
			};
			CHECK("post_srq_recv", ibv_post_srq_recv(srq, &rw, &bad) == 0, "-");
			errno = 0;
			CHECK("create_srq_ex_xrc_unsupported", !ibv_create_srq_ex(a.ctx, &sx) &&
			      errno == EOPNOTSUPP, "%d", errno);
			CHECK("destroy_srq", ibv_destroy_srq(srq) == 0, "-");
		}
		struct ibv_ah *h = ibv_create_ah(a.pd, &ah);
		CHECK("create_ah", h != NULL, "%d", errno);
		if (h)
			CHECK("destroy_ah", ibv_destroy_ah(h) == 0, "-");
		{
			/* Memory windows through the inline verbs: ops.alloc_mw, the inline
			 * ibv_bind_mw's own refusal of a type 2 window, ops.dealloc_mw. */
			struct ibv_mw *mw = ibv_alloc_mw(a.pd, IBV_MW_TYPE_2);
			struct ibv_mw_bind mb = { .wr_id = 1 };
			CHECK("alloc_mw", mw && mw->type == IBV_MW_TYPE_2 && mw->pd == a.pd, "%d", errno);
			if (mw) {
				CHECK("bind_mw_type2_einval", ibv_bind_mw(a.qp, mw, &mb) == EINVAL, "-");
				CHECK("dealloc_mw", ibv_dealloc_mw(mw) == 0, "-");
			}
		}
		errno = 0;
		CHECK("open_xrcd_unsupported", !ibv_open_xrcd(a.ctx, &xa) && errno == EOPNOTSUPP, "%d", errno);
		errno = 0;
		CHECK("alloc_dm_unsupported", !ibv_alloc_dm(a.ctx, &dm) && errno == EOPNOTSUPP, "%d", errno);
		errno = 0;
		CHECK("alloc_td_unsupported", !ibv_alloc_td(a.ctx, &td) && errno == EOPNOTSUPP, "%d", errno);
		CHECK("query_rt_values_unsupported", ibv_query_rt_values_ex(a.ctx, &rt) == EOPNOTSUPP, "-");
		CHECK("query_ece_unsupported", ibv_query_ece(a.qp, &ece) == EOPNOTSUPP, "-");
		CHECK("attach_mcast_unsupported", ibv_attach_mcast(a.qp, NULL, 0) == EOPNOTSUPP, "-");
	}
	CHECK("resize_cq", ibv_resize_cq(b.cq, 64) == 0 && b.cq->cqe == 64, "cqe %d", b.cq->cqe);
	CHECK("fork_unneeded", ibv_is_fork_initialized() == IBV_FORK_UNNEEDED, "-");
	CHECK("rate_to_mbps", ibv_rate_to_mbps(IBV_RATE_100_GBPS) == 103125, "-");
	CHECK("event_type_str", !strcmp(ibv_event_type_str(IBV_EVENT_PORT_ACTIVE), "port active"), "-");

	/* The data path through context->ops: an RDMA WRITE from soft0 to soft1. */
	CHECK("connect_a", to_rts(&a, &b) == 0, "-");
	CHECK("connect_b", to_rts(&b, &a) == 0, "-");
	{
		struct ibv_sge sge = { .addr = (uintptr_t)a.buf, .length = 64, .lkey = a.mr->lkey };
		struct ibv_send_wr wr = {
			.wr_id = 42, .sg_list = &sge, .num_sge = 1,
			.opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED,
			.wr.rdma = { .remote_addr = (uintptr_t)b.buf + 128, .rkey = b.mr->rkey },
		};
		struct ibv_send_wr *bad;
		struct ibv_wc wc;
		int polled = 0, tries;

		memset(a.buf, 0x5a, 64);
		CHECK("post_send", ibv_post_send(a.qp, &wr, &bad) == 0, "-");
		for (tries = 0; tries < 1000000 && polled == 0; tries++)
			polled = ibv_poll_cq(a.cq, 1, &wc);
		CHECK("write_completes", polled == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 42,
		      "polled %d status %s", polled, polled == 1 ? ibv_wc_status_str(wc.status) : "-");
		CHECK("write_lands", b.buf[128] == 0x5a && b.buf[191] == 0x5a && b.buf[192] == 0, "-");
	}

	ibv_destroy_qp(a.qp);
	ibv_destroy_qp(b.qp);
	ibv_dereg_mr(a.mr);
	ibv_dereg_mr(b.mr);
	ibv_destroy_cq(a.cq);
	ibv_destroy_cq(b.cq);
	ibv_dealloc_pd(a.pd);
	ibv_dealloc_pd(b.pd);
	ibv_close_device(a.ctx);
	ibv_close_device(b.ctx);
	ibv_free_device_list(list);
	printf("%d failures\n", failures);
	return failures ? 1 : 0;
}
