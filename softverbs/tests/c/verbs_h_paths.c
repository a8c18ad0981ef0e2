/*
 * A libibverbs program built against the system's <infiniband/verbs.h>, run by
 * tests/verbs_h.rs with softverbs' cdylib in place of libibverbs. It goes through the
 * header's inline paths (the extended verbs behind the verbs_context in front of every
 * softverbs context, the ops table of the data path, the ibv_cq_ex and ibv_qp_ex
 * functions) and the exported verbs softverbs answers with "not supported", and checks
 * what each returns.
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
	struct ibv_cq_ex *cqx;
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
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = s->pd,
		.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_SEND,
	};
	/* With send ops: the header calls the context's create_qp_ex. */
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

	struct ibv_cq_init_attr_ex cx = {
		.cqe = 16,
		.wc_flags = IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP,
	};

	s->ctx = ibv_open_device(dev);
	if (!s->ctx)
		return 1;
	s->pd = ibv_alloc_pd(s->ctx);
	s->cqx = ibv_create_cq_ex(s->ctx, &cx);
	s->cq = s->cqx ? ibv_cq_ex_to_cq(s->cqx) : NULL;
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
		struct ibv_values_ex rt = { .comp_mask = IBV_VALUES_MASK_RAW_CLOCK };
		int rc = ibv_query_device_ex(a.ctx, NULL, &dx);
		CHECK("query_device_ex", rc == 0 && dx.orig_attr.phys_port_cnt == 1 &&
		      dx.phys_port_cnt_ex == 1 && dx.max_dm_size == 256 * 1024 &&
		      dx.hca_core_clock == 1000000 &&
		      dx.odp_caps.general_caps == (IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT) &&
		      (dx.odp_caps.per_transport_caps.rc_odp_caps & IBV_ODP_SUPPORT_WRITE),
		      "rc %d", rc);
		CHECK("query_rt_values", ibv_query_rt_values_ex(a.ctx, &rt) == 0 &&
		      rt.comp_mask == IBV_VALUES_MASK_RAW_CLOCK && rt.raw_clock.tv_nsec > 0, "-");
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
		struct ibv_cq_init_attr_ex cx = { .cqe = 8, .wc_flags = IBV_WC_EX_WITH_CVLAN };
		errno = 0;
		CHECK("create_cq_ex_cvlan_unsupported", !ibv_create_cq_ex(a.ctx, &cx) &&
		      errno == EOPNOTSUPP, "errno %d", errno);
	}
	{
		struct ibv_qp_init_attr_ex qx = {
			.send_cq = a.cq, .recv_cq = a.cq, .qp_type = IBV_QPT_UD, .pd = a.pd,
			.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1,
				 .max_recv_sge = 1 },
			.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
			.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE,
		};
		struct ibv_qp_init_attr plain = {
			.send_cq = a.cq, .recv_cq = a.cq, .qp_type = IBV_QPT_RC,
			.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1,
				 .max_recv_sge = 1 },
		};
		struct ibv_qp *p = ibv_create_qp(a.pd, &plain);
		errno = 0;
		CHECK("create_qp_ex_ud_write_unsupported", !ibv_create_qp_ex(a.ctx, &qx) &&
		      errno == EOPNOTSUPP, "errno %d", errno);
		CHECK("qp_to_qp_ex", ibv_qp_to_qp_ex(a.qp) != NULL, "-");
		CHECK("qp_to_qp_ex_null", p && ibv_qp_to_qp_ex(p) == NULL, "-");
		if (p)
			ibv_destroy_qp(p);
	}
	{
		struct ibv_srq_init_attr sa = { .attr = { .max_wr = 4, .max_sge = 1 } };
		struct ibv_ah_attr ah = { .dlid = 1, .port_num = 1 };
		struct ibv_xrcd_init_attr xa = { 0 };
		struct ibv_alloc_dm_attr dm = { .length = 64 };
		struct ibv_td_init_attr td = { 0 };
		struct ibv_ece ece;
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
		struct ibv_dm *d = ibv_alloc_dm(a.ctx, &dm);
		CHECK("alloc_dm", d != NULL, "%d", errno);
		if (d) {
			uint32_t in[4] = { 1, 2, 3, 4 }, out[4] = { 0 };
			CHECK("memcpy_dm", ibv_memcpy_to_dm(d, 16, in, 16) == 0 &&
			      ibv_memcpy_from_dm(out, d, 16, 16) == 0 && out[3] == 4 &&
			      ibv_memcpy_to_dm(d, 2, in, 4) == EINVAL, "-");
			struct ibv_mr *m = ibv_reg_dm_mr(a.pd, d, 0, 64,
							 IBV_ACCESS_ZERO_BASED |
							 IBV_ACCESS_LOCAL_WRITE);
			CHECK("reg_dm_mr", m && m->addr == NULL, "%d", errno);
			if (m)
				ibv_dereg_mr(m);
			CHECK("free_dm", ibv_free_dm(d) == 0, "-");
		}
		struct ibv_td *t = ibv_alloc_td(a.ctx, &td);
		CHECK("alloc_td", t != NULL, "%d", errno);
		if (t) {
			struct ibv_parent_domain_init_attr pa = { .pd = a.pd, .td = t };
			struct ibv_pd *par = ibv_alloc_parent_domain(a.ctx, &pa);
			CHECK("parent_domain", par && ibv_dealloc_pd(par) == 0, "%d", errno);
			CHECK("dealloc_td", ibv_dealloc_td(t) == 0, "-");
		}
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
	/* The same through the ibv_wr_* API, polled with ibv_start_poll. */
	{
		struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(a.qp);
		struct ibv_poll_cq_attr pa = { 0 };
		int rc = ENOENT, tries;

		memset(a.buf, 0x6b, 32);
		ibv_wr_start(qx);
		qx->wr_id = 43;
		qx->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_rdma_write(qx, b.mr->rkey, (uintptr_t)b.buf + 256);
		ibv_wr_set_sge(qx, a.mr->lkey, (uintptr_t)a.buf, 32);
		CHECK("wr_complete", ibv_wr_complete(qx) == 0, "-");
		for (tries = 0; tries < 1000000 && rc == ENOENT; tries++)
			rc = ibv_start_poll(a.cqx, &pa);
		CHECK("start_poll", rc == 0 && a.cqx->wr_id == 43 &&
		      a.cqx->status == IBV_WC_SUCCESS &&
		      ibv_wc_read_opcode(a.cqx) == IBV_WC_RDMA_WRITE &&
		      ibv_wc_read_completion_ts(a.cqx) > 0, "rc %d", rc);
		if (rc == 0) {
			CHECK("next_poll", ibv_next_poll(a.cqx) == ENOENT, "-");
			ibv_end_poll(a.cqx);
		}
		CHECK("wr_write_lands", b.buf[256] == 0x6b && b.buf[287] == 0x6b &&
		      b.buf[288] == 0, "-");
		ibv_wr_start(qx);
		ibv_wr_rdma_write(qx, b.mr->rkey, (uintptr_t)b.buf);
		ibv_wr_set_sge(qx, a.mr->lkey, (uintptr_t)a.buf, 8);
		ibv_wr_abort(qx);
		CHECK("wr_abort", ibv_start_poll(a.cqx, &pa) == ENOENT, "-");
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
