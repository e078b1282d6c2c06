/// What the mock needs from a request that passed the protocol checks.
struct CheckedRequest: Equatable {
    var token: String
    var topic: String
    var apnsID: String?
    var authorization: String?
}

enum RequestCheck {
    enum Outcome: Equatable {
        case accepted(CheckedRequest)
        case rejected(status: Int, reason: String)
    }

    static func check(_ request: IncomingRequest, allowedTopics: [String]) -> Outcome {
        guard request.method == "POST" else { return .rejected(status: 405, reason: "MethodNotAllowed") }
        let prefix = "/3/device/"
        guard request.path.hasPrefix(prefix) else { return .rejected(status: 404, reason: "BadPath") }
        let token = String(request.path.dropFirst(prefix.count))
        return .accepted(CheckedRequest(
            token: token.lowercased(), topic: request.header("apns-topic") ?? "",
            apnsID: request.header("apns-id")?.lowercased(), authorization: request.header("authorization")))
    }
}
