import APNs
@testable import Dispatcher
import Testing

/// `apns.host`, `apns.sandbox_host` and `apns.channel_host` are parsed once, here: a host with
/// an optional port, an IPv6 literal only in brackets, anything else refused naming the setting.
@Suite struct HostOverrideTests {
    @Test(arguments: [
        ("api.push.apple.com", "api.push.apple.com", nil),
        ("127.0.0.1:8443", "127.0.0.1", 8443),
        ("mock.internal:2197", "mock.internal", 2197),
        ("[::1]", "::1", nil),
        ("[::1]:2197", "::1", 2197),
        ("[2001:db8::7]:443", "2001:db8::7", 443),
        ("host:65535", "host", 65535),
    ] as [(String, String, Int?)])
    func aHostWithOrWithoutAPortIsRead(text: String, host: String, port: Int?) throws {
        #expect(try HostOverride(parsing: text, setting: "apns.host") == HostOverride(host: host, port: port))
    }

    @Test(arguments: [
        ("", "it is empty"),
        ("host:", "the port '' is not a number from 1 to 65535"),
        ("host:abc", "the port 'abc' is not a number from 1 to 65535"),
        ("host:0", "the port '0' is not a number from 1 to 65535"),
        ("host:65536", "the port '65536' is not a number from 1 to 65535"),
        ("host:+443", "the port '+443' is not a number from 1 to 65535"),
        (":443", "the host is empty"),
        ("::1", "an IPv6 address goes in brackets, as [::1]:2197"),
        ("2001:db8::7:443", "an IPv6 address goes in brackets, as [::1]:2197"),
        ("[::1", "the IPv6 address has no closing ']'"),
        ("[::1]2197", "after ']' only ':port' may follow"),
        ("[::1]:", "the port '' is not a number from 1 to 65535"),
        ("[]:443", "only an IPv6 address goes in brackets"),
        ("[127.0.0.1]:443", "only an IPv6 address goes in brackets"),
        ("host]:443", "a bracket goes only around an IPv6 address"),
        ("https://host:443", "a host has no scheme or path"),
        ("host:443/path", "a host has no scheme or path"),
        ("my host", "' ' has no place in a host"),
        ("user@host", "'@' has no place in a host"),
    ])
    func aTextTheDispatcherCannotUseIsRefusedNamingTheSetting(text: String, reason: String) {
        #expect(throws: HostOverride.Invalid(setting: "apns.channel_host", text: text, reason: reason)) {
            try HostOverride(parsing: text, setting: "apns.channel_host")
        }
    }

    @Test func theErrorNamesTheSettingTheTextAndAnExample() {
        let error = HostOverride.Invalid(setting: "apns.sandbox_host", text: "mock:abc", reason: "the port 'abc' is not a number from 1 to 65535")
        #expect(error.description == "apns.sandbox_host: 'mock:abc' is not host or host:port (the port 'abc' is not a number from 1 to 65535); "
                + "for example apns-mock.internal, 127.0.0.1:2197 or [::1]:2197")
    }

    @Test func applyingAnOverrideKeepsThePortWhenItNamesNone() throws {
        var configuration = DispatcherConfiguration(host: "api.sandbox.push.apple.com", port: 2197)
        try configuration.applyHostOverride("[::1]", setting: "apns.sandbox_host")
        #expect(configuration.host == "::1" && configuration.port == 2197)
        try configuration.applyHostOverride("mock:8443", setting: "apns.sandbox_host")
        #expect(configuration.host == "mock" && configuration.port == 8443)
        #expect(throws: HostOverride.Invalid.self) { try configuration.applyHostOverride("mock:x", setting: "apns.sandbox_host") }
        #expect(configuration.host == "mock" && configuration.port == 8443, "a refused override changes nothing")
    }

    /// `apns.channel_host` replaces the channel management host: without a port, the port is
    /// the environment's channel management port, not the push port the configuration had.
    @Test(arguments: [(APNsEnvironment.sandbox, 2195), (.production, 2196)])
    func aChannelHostWithoutAPortTakesTheChannelManagementPort(environment: APNsEnvironment, port: Int) throws {
        var configuration = DispatcherConfiguration(host: "api.push.apple.com", port: 443)
        try configuration.applyChannelManagementHost(nil, environment: environment)
        #expect(configuration.host == environment.channelManagementHost && configuration.port == port)
        try configuration.applyChannelManagementHost("mgmt.example", environment: environment)
        #expect(configuration.host == "mgmt.example" && configuration.port == port)
        try configuration.applyChannelManagementHost("[::1]:8443", environment: environment)
        #expect(configuration.host == "::1" && configuration.port == 8443)
        #expect(throws: HostOverride.Invalid(setting: "apns.channel_host", text: "mgmt:0", reason: "the port '0' is not a number from 1 to 65535")) {
            try configuration.applyChannelManagementHost("mgmt:0", environment: environment)
        }
        #expect(configuration.host == "::1" && configuration.port == 8443, "a refused override changes nothing")
    }
}
