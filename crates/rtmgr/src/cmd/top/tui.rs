//! The terminal loop of `rtmgr top` (issue 23; cargo feature `top`): raw
//! mode and the alternate screen (crossterm through ratatui), a redraw per
//! key or refresh (ratatui draws only the cells that changed: no flicker,
//! little traffic over SSH), the terminal given back on exit or panic.

use super::collect::Collector;
use super::render;
use super::view::{Key, View};
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use std::io::IsTerminal;
use std::time::{Duration, Instant};

fn key_of(k: KeyEvent) -> Option<Key> {
    Some(match k.code {
        KeyCode::Char('c') if k.modifiers.contains(KeyModifiers::CONTROL) => Key::Quit,
        KeyCode::Char('q') | KeyCode::Char('Q') => Key::Quit,
        KeyCode::Char('p') | KeyCode::Char(' ') => Key::Pause,
        KeyCode::Char('s') => Key::Sort,
        KeyCode::Tab | KeyCode::BackTab => Key::SwitchPane,
        KeyCode::Up | KeyCode::Char('k') => Key::Up,
        KeyCode::Down | KeyCode::Char('j') => Key::Down,
        KeyCode::Enter => Key::Detail,
        KeyCode::Esc => Key::Close,
        _ => return None,
    })
}

/// Show the machine until `q`. `started`: when the command started (the
/// time to the first frame goes to the debug log).
pub fn run(collector: &mut Collector, interval: Duration, started: Instant) -> anyhow::Result<()> {
    if !std::io::stdout().is_terminal() {
        return super::super::bad_input(
            "rtmgr top needs a terminal on standard output; for scripts use `rtmgr top --once --json`",
        );
    }
    let mut view = View::new(View::color_from_env());
    let mut snap = collector.collect();
    let mut terminal = ratatui::init();
    let result = (|| -> anyhow::Result<()> {
        terminal.draw(|f| render::draw(f, &snap, &view))?;
        tracing::debug!("first frame after {:?}", started.elapsed());
        let mut next = Instant::now() + interval;
        while !view.quit {
            if event::poll(next.saturating_duration_since(Instant::now()))? {
                match event::read()? {
                    Event::Key(k) if k.kind == KeyEventKind::Press => {
                        if let Some(key) = key_of(k) {
                            view.key(key, &snap);
                        }
                    }
                    Event::Resize(..) => {}
                    _ => continue,
                }
            }
            if Instant::now() >= next {
                if !view.paused {
                    snap = collector.collect();
                }
                next = Instant::now() + interval;
            }
            terminal.draw(|f| render::draw(f, &snap, &view))?;
        }
        Ok(())
    })();
    ratatui::restore();
    result
}
