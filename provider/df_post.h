/* The provider's data path: the posts (post.c), their doorbells (doorbell.c), shared receive
 * queues (srq.c), the IB extensions (ext.c) and the staging area (stage.c). df.h includes it
 * after the objects these work on. */
#ifndef DF_POST_H
#define DF_POST_H

/* post.c, doorbell.c */
DAT_RETURN df_ep_post_send(DAT_EP_HANDLE, DAT_COUNT, DAT_LMR_TRIPLET *, DAT_DTO_COOKIE,
			   DAT_COMPLETION_FLAGS);
DAT_RETURN df_ep_post_recv(DAT_EP_HANDLE, DAT_COUNT, DAT_LMR_TRIPLET *, DAT_DTO_COOKIE,
			   DAT_COMPLETION_FLAGS);
DAT_RETURN df_ep_post_rdma_write(DAT_EP_HANDLE, DAT_COUNT, DAT_LMR_TRIPLET *, DAT_DTO_COOKIE,
				 const DAT_RMR_TRIPLET *, DAT_COMPLETION_FLAGS);
DAT_RETURN df_ep_post_rdma_read(DAT_EP_HANDLE, DAT_COUNT, DAT_LMR_TRIPLET *, DAT_DTO_COOKIE,
				const DAT_RMR_TRIPLET *, DAT_COMPLETION_FLAGS);
DAT_RETURN df_ep_post_fetch_and_add(DAT_EP_HANDLE, uint64_t, DAT_LMR_TRIPLET *, DAT_DTO_COOKIE,
				    const DAT_RMR_TRIPLET *, DAT_COMPLETION_FLAGS);
DAT_RETURN df_ep_post_cmp_and_swap(DAT_EP_HANDLE, uint64_t, uint64_t, DAT_LMR_TRIPLET *,
				   DAT_DTO_COOKIE, const DAT_RMR_TRIPLET *, DAT_COMPLETION_FLAGS);
DAT_RETURN df_ep_post_rdma_write_immed(DAT_EP_HANDLE, DAT_COUNT, DAT_LMR_TRIPLET *,
				       DAT_DTO_COOKIE, const DAT_RMR_TRIPLET *, uint32_t,
				       DAT_COMPLETION_FLAGS);
void df_ep_ring(struct df_ep *ep);
void df_srq_ring(struct df_srq *srq);
void df_ia_kick(struct df_ia *ia);
DAT_RETURN df_check_receive(struct df_ia *ia, const struct df_pz *pz, DAT_COUNT max_iov,
			    const DAT_LMR_TRIPLET *iov, DAT_COUNT n);
void df_write_receive(struct df_ring *ring, const DAT_LMR_TRIPLET *iov, DAT_COUNT n,
		      DAT_DTO_COOKIE cookie);

/* srq.c, and dat_ep_create_with_srq (ep.c) */
DAT_RETURN df_srq_create(DAT_IA_HANDLE, DAT_PZ_HANDLE, DAT_SRQ_ATTR *, DAT_SRQ_HANDLE *);
DAT_RETURN df_srq_free(DAT_SRQ_HANDLE);
DAT_RETURN df_srq_post_recv(DAT_SRQ_HANDLE, DAT_COUNT, DAT_LMR_TRIPLET *, DAT_DTO_COOKIE);
DAT_RETURN df_srq_query(DAT_SRQ_HANDLE, DAT_SRQ_PARAM_MASK, DAT_SRQ_PARAM *);
DAT_RETURN df_srq_resize(DAT_SRQ_HANDLE, DAT_COUNT);
DAT_RETURN df_srq_set_lw(DAT_SRQ_HANDLE, DAT_COUNT);
DAT_RETURN df_ep_create_with_srq(DAT_IA_HANDLE, DAT_PZ_HANDLE, DAT_EVD_HANDLE, DAT_EVD_HANDLE,
				 DAT_EVD_HANDLE, DAT_SRQ_HANDLE, const DAT_EP_ATTR *,
				 DAT_EP_HANDLE *);
void df_srq_destroy(struct df_srq *srq);
void df_srq_reap(struct df_ia *ia, const struct df_eqe *e);

/* ext.c: dat_extension_op (the IB extensions) */
DAT_RETURN df_handle_extendedop(DAT_HANDLE, DAT_EXTENDED_OP, va_list);

/* stage.c: copy a request's ``total`` bytes into the EP's staging area if ``stageable`` (an
 * unfenced Send or Write) and there is room (lock held; called for every request post, so the
 * area is given back in posting order): their offset there, or -1 when they are not staged. */
int64_t df_stage(struct df_ep *ep, const DAT_LMR_TRIPLET *iov, DAT_COUNT n, uint64_t total,
		 bool stageable);

#endif
