extension Migrator {
    /// A broadcast job or channel request is claimed by one autocommit statement. When the
    /// worker's session ended as the claim committed, the row was leased without the worker
    /// knowing: nothing sent it until its lease (the answer wait and 30 s) ran out, and the
    /// next claim then took it over from that live worker with a warning that it may have
    /// reached APNs (for a channel create, asking for a channel audit). A claim now names its
    /// claimer (`claimed_by`) and keeps the lease it replaced (`replaced_until`: one that ran
    /// out unsettled, or NULL), so the worker gives back, on its next session, what a claim
    /// whose answer it did not read took (`BroadcastQueue.giveBackClaims`,
    /// `ChannelStore.giveBackClaims`), and a replaced lease is put back for the next claim to
    /// see. Nullable columns without defaults: instances of the previous version sharing the
    /// database during an upgrade claim as before.
    static let claimOwnersV37 = #"""
    ALTER TABLE pushd.broadcast_jobs ADD COLUMN claimed_by text, ADD COLUMN replaced_until timestamptz;
    ALTER TABLE pushd.channels ADD COLUMN claimed_by text, ADD COLUMN replaced_until timestamptz;
    """#
}
