import APNs
import Posix
import APNsMock
import Dispatcher
import Foundation
import Testing

/// Channel management on the mock's own listener and broadcasts on its notification listener,
/// through the engine: real TLS, real HTTP/2, JWTs the mock verifies.
@Suite struct BroadcastOnTheWireTests {
    static let bundleID = "com.example.app"
    static let update = Array(#"{"aps":{"timestamp":1700000000,"event":"update","content-state":{"score":"2-1"}}}"#.utf8)

    private func clients(_ server: APNsMockServer, port: Int, material: MockMaterial) throws -> (management: APNsClient, sender: APNsClient) {
        let cache = ProviderTokenCache(key: try material.signingKey())
        let managementPort = try #require(server.channelManagementPort)
        let management = try APNsClient.channelManagement(environment: .sandbox, authentication: .token(cache), hostOverride: "127.0.0.1",
                                                          portOverride: Int(managementPort), tune: mockTuning(material, threads: 1))
        let sender = try APNsClient(environment: .sandbox, authentication: .token(cache), port: port, hostOverride: "127.0.0.1",
                                    tune: mockTuning(material, threads: 1))
        return (management, sender)
    }

    private func withChannelMock<T>(_ configure: (inout MockConfiguration) -> Void = { _ in },
                                    _ body: (APNsMockServer, Int, MockMaterial) async throws -> T) async throws -> T {
        try await withMock({ configuration, material in
            configuration.authentication = .token(keys: [material.trustedKey], startAtOneStream: true)
            configuration.channelManagementPort = 0
            configure(&configuration)
        }, body)
    }

    @Test func createListReadBroadcastAndDeleteAChannel() async throws {
        try await withChannelMock { server, port, material in
            let (management, sender) = try clients(server, port: port, material: material)
            defer { management.shutdown(); sender.shutdown() }

            let created = try await management.send(ChannelRequest(bundleID: Self.bundleID, operation: .create(.mostRecentMessageStored)))
            #expect(created.response?.status == 201)
            #expect(created.action == .delivered)
            let channel = try ChannelID(try #require(created.createdChannelID))

            let list = try await management.send(ChannelRequest(bundleID: Self.bundleID, operation: .listAll))
            #expect(list.response?.status == 200)
            #expect(ChannelAnswer.channels(fromListBody: list.successBody) == [channel.value])

            let read = try await management.send(ChannelRequest(bundleID: Self.bundleID, operation: .read(channel)))
            #expect(ChannelAnswer.storagePolicy(fromReadBody: read.successBody) == .mostRecentMessageStored)

            for _ in 0..<3 {
                let sent = try await sender.send(BroadcastNotification(bundleID: Self.bundleID, channelID: channel, priority: .conservePower,
                                                                       apnsID: APNsID(), payload: Self.update))
                #expect(sent.response?.status == 200)
                #expect(sent.action == .delivered)
            }

            let deleted = try await management.send(ChannelRequest(bundleID: Self.bundleID, operation: .delete(channel)))
            #expect(deleted.response?.status == 204)
            #expect(deleted.action == .delivered)

            let afterDelete = try await sender.send(BroadcastNotification(bundleID: Self.bundleID, channelID: channel, payload: Self.update))
            #expect(afterDelete.response?.status == 400)
            #expect(afterDelete.response?.reason == .channelNotRegistered)
            #expect(!afterDelete.action.retries)

            let stats = server.stats
            #expect(stats.channelsCreated == 1)
            #expect(stats.channelsDeleted == 1)
            #expect(stats.channelsLive == 0)
            #expect(stats.broadcastsAccepted == [channel.value: 3])
            #expect(stats.rejected("ChannelNotRegistered") == 1)
            #expect(server.metricsText.contains("apns_mock_broadcasts_accepted_total 3"))
        }
    }

    /// Apple: "Providing a nonzero expiration for a channel created with the No Message Stored
    /// storage policy results in message rejection" (400 BadExpirationDate).
    @Test func aNonzeroExpirationOnAChannelThatStoresNothingIsBadExpirationDate() async throws {
        try await withChannelMock { server, port, material in
            let (management, sender) = try clients(server, port: port, material: material)
            defer { management.shutdown(); sender.shutdown() }
            let created = try await management.send(ChannelRequest(bundleID: Self.bundleID, operation: .create(.noMessageStored)))
            let channel = try ChannelID(try #require(created.createdChannelID))
            let stored = try await sender.send(BroadcastNotification(bundleID: Self.bundleID, channelID: channel,
                                                                     expiration: 1_800_000_000, payload: Self.update))
            #expect(stored.response?.status == 400)
            #expect(stored.response?.reason == .badExpirationDate)
            #expect(!stored.action.retries)
            let requestID = APNsID()
            let once = try await sender.send(BroadcastNotification(bundleID: Self.bundleID, channelID: channel, expiration: 0,
                                                                   apnsID: requestID, payload: Self.update))
            #expect(once.response?.status == 200)
            // Apple's success answer: apns-request-id (the one sent) and apns-unique-id.
            #expect(once.dispatch.response?.uniqueID != nil)
            #expect(once.dispatch.response?.uniqueID != requestID)
        }
    }

    @Test func broadcastsToAnUnknownChannelAreChannelNotRegistered() async throws {
        try await withChannelMock { server, port, material in
            let (management, sender) = try clients(server, port: port, material: material)
            defer { management.shutdown(); sender.shutdown() }
            let unknown = try ChannelID("bm90LWEtY2hhbm5lbA==")
            let sent = try await sender.send(BroadcastNotification(bundleID: Self.bundleID, channelID: unknown, payload: Self.update))
            #expect(sent.response?.reason == .channelNotRegistered)
            let read = try await management.send(ChannelRequest(bundleID: Self.bundleID, operation: .read(unknown)))
            #expect(read.response?.status == 400)
            #expect(read.response?.reason == .channelNotRegistered)
        }
    }

    @Test func theChannelLimitAnswersCannotCreateChannelConfig() async throws {
        try await withChannelMock({ $0.maxChannelsPerApp = 1 }) { server, port, material in
            let (management, sender) = try clients(server, port: port, material: material)
            defer { management.shutdown(); sender.shutdown() }
            let first = try await management.send(ChannelRequest(bundleID: Self.bundleID, operation: .create(.noMessageStored)))
            #expect(first.response?.status == 201)
            let second = try await management.send(ChannelRequest(bundleID: Self.bundleID, operation: .create(.noMessageStored)))
            #expect(second.response?.status == 400)
            #expect(second.response?.reason == .cannotCreateChannelConfig)
            #expect(second.action == .holdScope(.channelCreation, reason: .cannotCreateChannelConfig,
                                                why: "the app has as many channels as APNs allows (CannotCreateChannelConfig); delete channels no longer used"))
        }
    }

    /// A certificate client sends a channel request with no `authorization` header (APNs
    /// "ignores this header if you use certificate-based authentication"); a host that takes
    /// provider tokens refuses it, and a broadcast without one, as it refuses any other.
    @Test func bothAPIsRequireAProviderTokenOnAHostThatTakesTokens() async throws {
        try await withChannelMock { server, port, material in
            let managementPort = try #require(server.channelManagementPort)
            let certificate = try material.clientCredential()
            let management = try APNsClient(environment: .sandbox, authentication: .certificate(certificate), port: Int(managementPort),
                                            hostOverride: "127.0.0.1", tune: mockTuning(material, threads: 1))
            defer { management.shutdown() }
            let list = try await management.send(ChannelRequest(bundleID: Self.bundleID, operation: .listAll))
            #expect(list.response?.status == 403)
            #expect(list.response?.reason == .missingProviderToken)
            // On the wire, a request without a token is refused like any other.
            let dispatcher = management.dispatcher
            let request = try DispatchRequest(method: .get, path: "/1/apps/\(Self.bundleID)/all-channels", headerLines: [], body: [])
            let answer = await dispatcher.send(request, tag: 0)
            #expect(answer.response?.status == 403)
            #expect(answer.response?.reason == "MissingProviderToken")
            let broadcast = try DispatchRequest(path: "/4/broadcasts/apps/\(Self.bundleID)",
                                                headerLines: ["apns-push-type: liveactivity", "apns-channel-id: bm90LWEtY2hhbm5lbA==",
                                                              "apns-priority: 10", "apns-expiration: 0"],
                                                body: Self.update)
            let sender = try APNsClient(environment: .sandbox, authentication: .certificate(certificate), port: port,
                                        hostOverride: "127.0.0.1", tune: mockTuning(material, threads: 1))
            defer { sender.shutdown() }
            let refused = await sender.dispatcher.send(broadcast, tag: 0)
            #expect(refused.response?.status == 403)
            #expect(refused.response?.reason == "MissingProviderToken")
        }
    }
}
