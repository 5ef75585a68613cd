//! The README's five-minute walkthrough is `examples/five_minutes/main.rs`, word for word,
//! and that program starts, says which store it counts in, and limits.

mod support;

use std::{
    io::{BufRead as _, BufReader, Read as _, Write as _},
    net::{TcpListener, TcpStream},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

const EXAMPLE: &str = include_str!("../examples/five_minutes/main.rs");

#[test]
fn the_readme_walkthrough_is_the_five_minutes_example() {
    let readme = include_str!("../README.md");
    let opening = "   ```rust\n   use actix_cors::Cors;";
    let start = readme
        .find(opening)
        .expect("the walkthrough's main.rs block")
        + 11;
    let end = start + readme[start..].find("   ```\n").expect("its end");
    let block: String = readme[start..end]
        .lines()
        .map(|line| format!("{}\n", line.strip_prefix("   ").unwrap_or(line)))
        .collect();
    assert_eq!(
        block, EXAMPLE,
        "README.md and examples/five_minutes/main.rs differ"
    );
}

/// One HTTP/1.1 request; the status code.
fn status(method: &str, path: &str, body: &str) -> u16 {
    let mut stream = TcpStream::connect("127.0.0.1:8080").expect("connect");
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status in {answer:?}"))
}

#[test]
fn the_five_minutes_example_starts_says_its_store_and_limits() {
    // It binds 127.0.0.1:8080, as the README says; another program there is not ours.
    if TcpListener::bind("127.0.0.1:8080").is_err() {
        eprintln!("skipped: 127.0.0.1:8080 is in use");
        return;
    }
    let mut child = Command::new(support::example("five_minutes"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the example");
    // Its log lines, read on a thread of their own so that a silent program cannot hang
    // the test.
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let (sender, logged) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stdout.lines().map_while(Result::ok) {
            let _ = sender.send(line);
        }
    });
    let started = Instant::now();
    while TcpStream::connect("127.0.0.1:8080").is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the example never listened"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let login = r#"{"username":"alice","password":"x"}"#;
    let statuses: Vec<u16> = (0..11).map(|_| status("POST", "/login", login)).collect();
    let health = status("GET", "/health", "");
    let _ = child.kill();
    let _ = child.wait();
    let ready = logged
        .try_iter()
        .find(|line| line.contains("rate limiter ready"))
        .expect("a `rate limiter ready` line");
    assert!(ready.contains("counting in memory"), "{ready}");
    assert_eq!(statuses[..10], [200; 10], "{statuses:?}");
    assert_eq!(statuses[10], 429, "{statuses:?}");
    assert_eq!(health, 200);
}

/// The walkthrough's program, built here too, with a test beside its `app` and `limiter`.
#[allow(dead_code)]
mod five_minutes {
    include!("../examples/five_minutes/main.rs");

    #[actix_web::test]
    async fn the_walkthrough_puts_the_limiter_inside_the_apps_auth_and_cors() {
        use actix_web::test::{call_service, init_service, TestRequest};
        // The walkthrough's App and limiter, out of shadow.
        let app = init_service(app(limiter().shadow(false))).await;
        let legacy = |user: &str| {
            TestRequest::get()
                .uri("/legacy")
                .insert_header(("authorization", format!("Bearer {user}")))
                .insert_header(("origin", "https://app.example"))
                .peer_addr("203.0.113.7:4000".parse().unwrap())
                .to_request()
        };
        for _ in 0..30 {
            assert_eq!(call_service(&app, legacy("alice")).await.status(), 200);
        }
        let refused = call_service(&app, legacy("alice")).await;
        assert_eq!(refused.status(), 429);
        // CORS runs outside the limiter: its 429 carries the CORS header a browser needs to
        // show it to the page.
        assert_eq!(
            refused
                .headers()
                .get("access-control-allow-origin")
                .unwrap(),
            "https://app.example"
        );
        // The limiter counts by the `UserId` the auth layer set, so it runs after it: another
        // user behind the same address has a budget of their own (by address, they would share
        // alice's).
        assert_eq!(call_service(&app, legacy("bob")).await.status(), 200);
    }
}
