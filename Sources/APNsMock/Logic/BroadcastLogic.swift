import APNs
import Posix

/// Broadcast sends (on the notification listener) and channel management (on its own
/// listener), decided like the rest: the request's form, then the provider token (a request
/// on a certificate connection needs none), then the channel registry and the rate faults.
extension ConnectionLogic {
    mutating func decideBroadcast(_ request: IncomingRequest, faults: FaultConfiguration, now: Int64, requestedID: String?) -> Answer {
        let verdict = settings.broadcastJudge.judgeBroadcast(method: request.method, path: request.path,
                                                             headers: request.headers, body: request.body)
        let accepted: BroadcastRequestJudge.AcceptedBroadcast
        switch verdict {
        case .rejected(let status, let reason): return reject(status, reason, apnsID: requestedID ?? makeID())
        case .accepted(let value): accepted = value
        }
        let apnsID = accepted.apnsID ?? makeID()
        // Apple: "APNs validates the request using either the provided authentication token or
        // your server's certificate". With a certificate the connection's TLS handshake has
        // authenticated the sender, and the judge has held the bundle id to the certificate's
        // topics (TopicDisallowed), as for a device push; there is no token to check.
        if !settings.certificateMode, let (status, reason) = authenticate(accepted.authorization, now: now) {
            return reject(status, reason, apnsID: apnsID)
        }
        if settings.topicMismatchBundleIDs.contains(accepted.bundleID) { return reject(403, .topicMismatch, apnsID: apnsID) }
        if settings.broadcastDisabledBundleIDs.contains(accepted.bundleID) { return reject(400, .featureNotEnabled, apnsID: apnsID) }
        if !faults.forbiddenChannels.isEmpty && faults.forbiddenChannels.contains(accepted.channelID.value) {
            return reject(403, .forbidden, apnsID: apnsID)
        }
        if let (status, reason) = rollErrorRates(faults) { return reject(status, reason, apnsID: apnsID) }
        // Apple: "For channels with a No Messages Stored storage policy, you can only specify a
        // 0 expiration value."
        if accepted.expiration != 0,
           settings.channels.policy(bundleID: accepted.bundleID, channelID: accepted.channelID.value) == .noMessageStored {
            return reject(400, .badExpirationDate, apnsID: apnsID)
        }
        guard settings.channels.recordBroadcast(bundleID: accepted.bundleID, channelID: accepted.channelID.value) else {
            return reject(400, .channelNotRegistered, apnsID: apnsID)
        }
        var answer = Answer(status: 200, apnsID: apnsID)
        // Counted per channel in `broadcastsAccepted`, apart from device notifications.
        answer.countsAsNotification = false
        // Apple's success answer to a broadcast: apns-request-id and apns-unique-id.
        answer.extraHeaders = [HeaderField(name: APNsHeader.channelID, value: accepted.channelID.value),
                               HeaderField(name: APNsHeader.requestID, value: apnsID),
                               HeaderField(name: APNsHeader.uniqueID, value: makeID())]
        return answer
    }

    mutating func decideChannelRequest(_ request: IncomingRequest, faults: FaultConfiguration, now: Int64) -> Answer {
        let requestID = request.header(APNsHeader.requestID).flatMap { APNsID.isCanonical($0) ? $0.lowercased() : nil } ?? makeID()
        func answer(_ status: Int, _ reason: APNsReason? = nil) -> Answer {
            var answer = Answer(status: status, apnsID: "", reason: reason?.rawValue)
            answer.extraHeaders = [HeaderField(name: APNsHeader.requestID, value: requestID)]
            answer.countsAsNotification = false
            return answer
        }
        let verdict = settings.broadcastJudge.judgeChannelRequest(method: request.method, path: request.path,
                                                                  headers: request.headers, body: request.body)
        let accepted: BroadcastRequestJudge.AcceptedChannelRequest
        switch verdict {
        case .rejected(let status, let reason): return answer(status, reason)
        case .accepted(let value): accepted = value
        }
        // Apple's "Sending channel management requests to APNs" has `authorization` "Required,
        // if mTLS authentication is omitted" for create and read and "Required for token-based
        // authentication" for delete and list, and "APNs ignores this header if you use
        // certificate-based authentication": on a certificate connection the TLS handshake has
        // authenticated the sender and the judge has held the path's bundle id to the
        // certificate's topics (TopicDisallowed), as for a broadcast.
        if !settings.certificateMode, let (status, reason) = authenticate(accepted.authorization, now: now) {
            return answer(status, reason)
        }
        if settings.topicMismatchBundleIDs.contains(accepted.bundleID) { return answer(403, .topicMismatch) }
        if settings.broadcastDisabledBundleIDs.contains(accepted.bundleID) { return answer(400, .featureNotEnabled) }
        // The channel management API fails, is overloaded or shuts down as the push API does.
        if let (status, reason) = rollErrorRates(faults) { return answer(status, reason) }

        let channels = settings.channels
        switch accepted.operation {
        case .create(let policy):
            switch channels.create(bundleID: accepted.bundleID, policy: policy) {
            case .limitReached:
                return answer(400, .cannotCreateChannelConfig)
            case .created(let id):
                var created = answer(201)
                created.extraHeaders.append(HeaderField(name: APNsHeader.channelID, value: id))
                return created
            }
        case .read(let id):
            guard let policy = channels.policy(bundleID: accepted.bundleID, channelID: id.value) else {
                return answer(400, .channelNotRegistered)
            }
            var read = answer(200)
            read.successBody = ChannelAnswer.readBody(policy)
            read.extraHeaders.append(HeaderField(name: APNsHeader.channelID, value: id.value))
            return read
        case .delete(let id):
            guard channels.delete(bundleID: accepted.bundleID, channelID: id.value) else { return answer(400, .channelNotRegistered) }
            return answer(204)
        case .listAll:
            var list = answer(200)
            list.successBody = ChannelAnswer.listBody(channels.list(bundleID: accepted.bundleID))
            return list
        }
    }
}
