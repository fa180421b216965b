"""The target side, shared by the trainer and by serving: where a target's files come from
(`models`, `embedded`), its configuration and target-side policies (`config`), chat rendering
(`chat`), hidden-state capture (`capture`), rollback of linear-attention state (`linear_state`)
and the backends that turn conversations into training samples (`backends`)."""
